// FERRITE_CHECK: internal invariants. A failed check is a bug in Ferrite, not
// bad input: it prints file:line and the streamed message, then aborts.
#pragma once

#include <sstream>

namespace ferrite::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* expr);
  [[noreturn]] ~CheckFailure();
  template <typename T>
  CheckFailure& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

// Lets `cond ? (void)0 : Voidify() & CheckFailure(...) << x` type-check.
struct Voidify {
  void operator&(const CheckFailure&) {}
};

}  // namespace ferrite::internal

#define FERRITE_CHECK(cond)                 \
  (cond) ? (void)0                          \
         : ::ferrite::internal::Voidify() & \
               ::ferrite::internal::CheckFailure(__FILE__, __LINE__, #cond)

#define FERRITE_CHECK_EQ(a, b) FERRITE_CHECK((a) == (b)) << (a) << " vs " << (b) << " "
#define FERRITE_CHECK_LT(a, b) FERRITE_CHECK((a) < (b)) << (a) << " vs " << (b) << " "
#define FERRITE_CHECK_LE(a, b) FERRITE_CHECK((a) <= (b)) << (a) << " vs " << (b) << " "
