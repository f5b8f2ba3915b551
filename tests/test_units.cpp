#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "core/units.hpp"

using namespace nunchaku;

TEST_CASE("sizes: binary and decimal units as the guide defines them", "[units]") {
  CHECK(parse_size("16G") == 16ULL << 30);
  CHECK(parse_size("16GiB") == 16ULL << 30);
  CHECK(parse_size("16 gib") == 16ULL << 30);
  CHECK(parse_size("16GB") == 16000000000ULL);
  CHECK(parse_size("512M") == 512ULL << 20);
  CHECK(parse_size("1.5T") == 1649267441664ULL);
  CHECK(parse_size("4096B") == 4096U);
  CHECK(parse_size("0") == 0U);
  CHECK(parse_size("0G") == 0U);
  // A number without a unit is ambiguous (bytes? GiB?): refused, except 0.
  CHECK_FALSE(parse_size("4096").has_value());
  CHECK_FALSE(parse_size("16").has_value());
  CHECK_FALSE(parse_size("").has_value());
  CHECK_FALSE(parse_size("-1G").has_value());
  CHECK_FALSE(parse_size("16X").has_value());
  CHECK_FALSE(parse_size("G").has_value());
  CHECK_FALSE(parse_size("99999999999T").has_value());
  CHECK_THROWS_AS(parse_size_or_throw("lots", "--vram"), Error);
  try {
    parse_size_or_throw("16", "--vram");
    FAIL("a unitless 16 was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == "usage.size_unit");
    CHECK(e.exit_code() == 2);
    CHECK(e.context().hint.find("16G = 16 GiB") != std::string::npos);
  }
}

TEST_CASE("sizes: formatting", "[units]") {
  CHECK(format_bytes(100) == "100 B");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(13476831232ULL) == "12.55 GiB");
  CHECK(format_count(6738415616ULL) == "6.74B");
  CHECK(format_count(512) == "512");
}
