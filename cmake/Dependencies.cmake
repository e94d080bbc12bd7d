# Every third-party dependency of dynrt, found from Debian 12's packages
# (scripts/install-deps.sh installs them). Targets are imported as SYSTEM so that their
# headers do not trip our warnings.

find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)

# CAF 0.17.6: Debian ships neither a CMake config nor a .pc file, so the imported targets
# are defined here (../shared/notes/caf-0.17.md, section 1).
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY NAMES caf_core REQUIRED)
add_library(CAF::core SHARED IMPORTED GLOBAL)
set_target_properties(CAF::core PROPERTIES
  IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
  INTERFACE_LINK_LIBRARIES Threads::Threads)

find_package(yaml-cpp 0.7 REQUIRED)           # target `yaml-cpp` (0.7 has no namespace)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)   # Eigen3::Eigen
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET GLOBAL libxxhash>=0.8)
pkg_check_modules(RE2 REQUIRED IMPORTED_TARGET GLOBAL re2)
# hiredis 0.14 (Debian 12): the shared library tier's Redis client (store/).
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET GLOBAL hiredis>=0.14)
find_package(CURL 7.68 REQUIRED)              # CURL::libcurl
find_package(OpenSSL 3 REQUIRED)              # OpenSSL::Crypto (key digests), OpenSSL::SSL (TLS)
find_package(nlohmann_json 3.11 REQUIRED)     # nlohmann_json::nlohmann_json
find_package(CLI11 REQUIRED)                  # CLI11::CLI11
find_package(spdlog REQUIRED)                 # spdlog::spdlog
find_package(Boost 1.74 REQUIRED COMPONENTS system)

# kainjow mustache is a single header without a CMake package.
find_path(MUSTACHE_INCLUDE_DIR kainjow/mustache.hpp REQUIRED)
add_library(kainjow::mustache INTERFACE IMPORTED GLOBAL)
set_target_properties(kainjow::mustache PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${MUSTACHE_INCLUDE_DIR}")

if(DYNRT_BUILD_BENCH)
  find_package(benchmark 1.7 REQUIRED)        # benchmark::benchmark
endif()
if(DYNRT_BUILD_TESTS)
  find_package(GTest 1.12 REQUIRED)           # GTest::gtest GTest::gtest_main GTest::gmock
  find_package(rapidcheck REQUIRED)           # rapidcheck
endif()
