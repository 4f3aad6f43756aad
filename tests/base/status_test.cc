#include "base/status.h"

#include <gtest/gtest.h>

namespace ferrite {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("not positive: " + std::to_string(v));
  return v;
}

Status use(int v, int* out) {
  FERRITE_ASSIGN_OR_RETURN(*out, parse_positive(v));
  return Status::ok();
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::ok().is_ok());
  Status s = not_found("x.safetensors");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.to_string(), "NotFound: x.safetensors");
  EXPECT_EQ(s.with_context("loading").message(), "loading: x.safetensors");
}

TEST(StatusTest, ResultPropagates) {
  int out = 0;
  EXPECT_TRUE(use(3, &out).is_ok());
  EXPECT_EQ(out, 3);
  Status s = use(-1, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out, 3);
}

}  // namespace
}  // namespace ferrite
