# Compile flags shared by every shardd target (target-scoped through shardd_flags).
add_library(shardd_flags INTERFACE)
# Host-compiler flags apply to C++ only: nvcc (.cu sources) rejects -march and -fopenmp-simd.
target_compile_options(shardd_flags INTERFACE "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wno-unused-parameter;-fopenmp-simd>")
target_include_directories(shardd_flags INTERFACE ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/generated)
if(SHARDD_NATIVE)
  target_compile_options(shardd_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()
if(SHARDD_SANITIZE)
  string(REPLACE ";" "," _san "${SHARDD_SANITIZE}")
  target_compile_options(shardd_flags INTERFACE "$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${_san};-fno-omit-frame-pointer>")
  target_link_options(shardd_flags INTERFACE -fsanitize=${_san})
endif()
# Fuzzing: every library gets libFuzzer's coverage hooks and ASan+UBSan (UB
# aborts, so the fuzzer records it as a crash); only the fuzz targets link the
# fuzzer's main (tests/fuzz/CMakeLists.txt).
if(SHARDD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SHARDD_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  target_compile_options(shardd_flags INTERFACE
    "$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined;-fno-sanitize-recover=undefined;-fno-omit-frame-pointer;-g>")
  target_link_options(shardd_flags INTERFACE -fsanitize=address,undefined)
endif()

# shardd_library(NAME SOURCES... DEPS ...): one static library per folder.
function(shardd_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SOURCES})
  target_link_libraries(${name} PUBLIC shardd_flags ${A_DEPS})
endfunction()
