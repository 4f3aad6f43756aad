#include "tokenizer/unicode.h"

#include <algorithm>
#include <vector>

namespace ferrite::tokenizer {
namespace {

struct CccEntry {
  char32_t cp;
  uint8_t ccc;
};
struct DecompEntry {
  char32_t cp;
  char32_t first;
  char32_t second;  // 0 for a singleton decomposition
};
struct ComposeEntry {
  char32_t first;
  char32_t second;
  char32_t composite;
};
#include "tokenizer/nfc_tables.inc"

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
              kSCount = kLCount * kNCount;

uint8_t ccc_of(char32_t cp) {
  if (cp < 0x300) return 0;
  auto it = std::lower_bound(std::begin(kCcc), std::end(kCcc), cp,
                             [](const CccEntry& e, char32_t c) { return e.cp < c; });
  return (it != std::end(kCcc) && it->cp == cp) ? it->ccc : 0;
}

const DecompEntry* decomp_of(char32_t cp) {
  if (cp < 0xC0) return nullptr;
  auto it = std::lower_bound(std::begin(kDecomp), std::end(kDecomp), cp,
                             [](const DecompEntry& e, char32_t c) { return e.cp < c; });
  return (it != std::end(kDecomp) && it->cp == cp) ? &*it : nullptr;
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  auto it =
      std::lower_bound(std::begin(kCompose), std::end(kCompose), std::pair{a, b},
                       [](const ComposeEntry& e, const std::pair<char32_t, char32_t>& k) {
                         return e.first < k.first || (e.first == k.first && e.second < k.second);
                       });
  if (it != std::end(kCompose) && it->first == a && it->second == b) return it->composite;
  return 0;
}

// True when `cp` can combine with a preceding character under composition.
bool is_compose_second(char32_t cp) {
  static const std::vector<char32_t> seconds = [] {
    std::vector<char32_t> v;
    for (const auto& e : kCompose) v.push_back(e.second);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }();
  if (cp >= kVBase && cp < kVBase + kVCount) return true;
  if (cp > kTBase && cp < kTBase + kTCount) return true;
  return std::binary_search(seconds.begin(), seconds.end(), cp);
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const DecompEntry* d = decomp_of(cp);
  if (d == nullptr) {
    out.push_back(cp);
    return;
  }
  decompose(d->first, out);
  if (d->second != 0) decompose(d->second, out);
}

// Length of a UTF-8 sequence led by `b`, with the allowed range of its second
// byte (RFC 3629 table 3-7); 0 when `b` cannot lead.
int lead_info(unsigned char b, unsigned char& lo, unsigned char& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) {
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
    return 3;
  }
  if (b >= 0xF0 && b <= 0xF4) {
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
    return 4;
  }
  return 0;
}

// Length of the valid-so-far prefix of the sequence at s[pos] (1..n), and
// whether it is a complete character.
size_t scan_sequence(std::string_view s, size_t pos, bool& complete) {
  unsigned char lo, hi;
  int n = lead_info(static_cast<unsigned char>(s[pos]), lo, hi);
  if (n == 0) {
    complete = false;
    return 0;
  }
  size_t i = 1;
  for (; i < static_cast<size_t>(n) && pos + i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[pos + i]);
    if (i == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) {
      complete = false;
      return i;
    }
  }
  complete = i == static_cast<size_t>(n);
  return i;
}

}  // namespace

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t next_code_point(std::string_view s, size_t& pos) {
  auto b = static_cast<unsigned char>(s[pos]);
  if (b < 0x80) {
    ++pos;
    return b;
  }
  int n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  char32_t cp = b & (0x7F >> n);
  for (int i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[pos + i]) & 0x3F);
  pos += n;
  return cp;
}

size_t valid_utf8_prefix(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    bool complete;
    size_t n = scan_sequence(s, pos, complete);
    if (!complete) return pos;
    pos += n;
  }
  return pos;
}

Status validate_utf8(std::string_view s) {
  size_t n = valid_utf8_prefix(s);
  if (n == s.size()) return Status::ok();
  return invalid_argument("input is not valid UTF-8: bad byte 0x" +
                          [&] {
                            static const char* kHex = "0123456789ABCDEF";
                            auto b = static_cast<unsigned char>(s[n]);
                            return std::string{kHex[b >> 4], kHex[b & 15]};
                          }() +
                          " at byte offset " + std::to_string(n));
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      out.push_back(s[pos++]);
      continue;
    }
    bool complete;
    size_t n = scan_sequence(s, pos, complete);
    if (complete) {
      out.append(s.substr(pos, n));
      pos += n;
    } else {
      append_utf8(kReplacementChar, out);
      pos += std::max<size_t>(n, 1);
    }
  }
  return out;
}

size_t utf8_emittable_prefix(std::string_view s) {
  // Only the last (at most 3) bytes can be an incomplete character.
  size_t start = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t pos = s.size(); pos-- > start;) {
    auto b = static_cast<unsigned char>(s[pos]);
    if (b < 0x80) return s.size();
    if (b >= 0xC0) {
      bool complete;
      size_t n = scan_sequence(s, pos, complete);
      // Incomplete only because the input ended: hold it back.
      if (!complete && pos + n == s.size()) return pos;
      return s.size();
    }
  }
  return s.size();
}

std::string nfc(std::string_view s) {
  // Fast path: text in which no character decomposes, reorders or composes.
  size_t pos = 0;
  bool simple = true;
  while (pos < s.size()) {
    if (static_cast<unsigned char>(s[pos]) < 0xC3) {  // below U+00C0
      pos += static_cast<unsigned char>(s[pos]) < 0x80 ? 1 : 2;
      continue;
    }
    char32_t cp = next_code_point(s, pos);
    if (ccc_of(cp) != 0 || decomp_of(cp) != nullptr || is_compose_second(cp) ||
        (cp >= kSBase && cp < kSBase + kSCount)) {
      simple = false;
      break;
    }
  }
  if (simple) return std::string(s);

  std::vector<char32_t> cps;
  cps.reserve(s.size());
  pos = 0;
  while (pos < s.size()) decompose(next_code_point(s, pos), cps);
  // Canonical ordering: stable sort of each run of non-starters by class.
  for (size_t i = 0; i < cps.size();) {
    if (ccc_of(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc_of(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](char32_t a, char32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  // Canonical composition.
  std::vector<char32_t> out;
  out.reserve(cps.size());
  size_t starter = SIZE_MAX;
  int last_ccc = -1;
  for (char32_t cp : cps) {
    int c = ccc_of(cp);
    if (starter != SIZE_MAX) {
      bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= c);
      // A character directly after the starter is never blocked.
      if (out.size() == starter + 1) blocked = false;
      if (!blocked) {
        if (char32_t comp = compose_pair(out[starter], cp); comp != 0) {
          out[starter] = comp;
          continue;
        }
      }
    }
    if (c == 0) {
      starter = out.size();
      last_ccc = -1;
    } else {
      last_ccc = c;
    }
    out.push_back(cp);
  }
  std::string result;
  result.reserve(s.size());
  for (char32_t cp : out) append_utf8(cp, result);
  return result;
}

}  // namespace ferrite::tokenizer
