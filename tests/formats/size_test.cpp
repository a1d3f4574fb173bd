// Byte sizes as config keys and flags write them, and as logs show them (formats/src/size.cpp).
#include "pstar/base/size.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace pstar {
namespace {

TEST(SizeTest, ParsesUnitsAndRejectsNonsense) {
  EXPECT_EQ(parse_size_bytes("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(parse_size_bytes("80GiB"), int64_t{80} << 30);
  EXPECT_EQ(parse_size_bytes("1.5GB"), int64_t{1500000000});
  EXPECT_EQ(parse_size_bytes("2 kib"), 2048);
  EXPECT_EQ(parse_size_bytes("4096"), 4096);
  EXPECT_EQ(parse_size_bytes("16g"), int64_t{16} << 30);
  EXPECT_FALSE(parse_size_bytes("").has_value());
  EXPECT_FALSE(parse_size_bytes("0MiB").has_value());
  EXPECT_FALSE(parse_size_bytes("-1GiB").has_value());
  EXPECT_FALSE(parse_size_bytes("5 parsecs").has_value());
  EXPECT_FALSE(parse_size_bytes("GiB").has_value());
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(int64_t{3} << 29), "1.50 GiB");
}

}  // namespace
}  // namespace pstar
