// The Catch2 main for the single test executable; test files live beside it.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
