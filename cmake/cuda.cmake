# The CUDA kernels (src/kernels/cuda/), their test and their benchmark.
#
# -DDI_CUDA=AUTO (default): built when CMake finds a CUDA compiler;
#           ON: required (configure fails without nvcc);
#           OFF: not built, and nothing else changes (libdeepinfer, the
#           command and every other test are built exactly as without this
#           file). docs/CUDA.md has the rest.
#
# The library, libdeepinfer_cuda.a, is separate from libdeepinfer: only what
# links it (test_cuda, bench_cuda and, later, the backend table) needs the
# CUDA runtime, which is linked statically so the binaries start (and the
# test skips with a message) on machines without the driver.
set(DI_CUDA AUTO CACHE STRING "CUDA kernels: ON, OFF or AUTO (on when a CUDA compiler is found)")
set_property(CACHE DI_CUDA PROPERTY STRINGS AUTO ON OFF)
set(DI_HAVE_CUDA OFF)
if(NOT DI_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(DI_HAVE_CUDA ON)
  elseif(DI_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DI_CUDA=ON but no CUDA compiler was found: put nvcc on PATH or set CUDACXX")
  endif()
endif()

if(NOT DI_HAVE_CUDA)
  if(DI_CUDA STREQUAL "OFF")
    set(DI_CUDA_WHY "configured with -DDI_CUDA=OFF")
  else()
    set(DI_CUDA_WHY "CMake found no CUDA compiler (nvcc)")
  endif()
  message(STATUS "CUDA: not built (${DI_CUDA_WHY}); test_cuda reports itself skipped")
  # One ctest entry that says so, reported as skipped (exit 77).
  add_test(NAME test_cuda COMMAND sh -c "echo 'test_cuda: CUDA tests skipped: ${DI_CUDA_WHY}'; exit 77")
  set_tests_properties(test_cuda PROPERTIES SKIP_RETURN_CODE 77)
  return()
endif()

# sm_90 (H200/H100) machine code plus its PTX, unless the caller names others.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
message(STATUS "CUDA: building src/kernels/cuda with ${CMAKE_CUDA_COMPILER} "
               "${CMAKE_CUDA_COMPILER_VERSION} for sm_${CMAKE_CUDA_ARCHITECTURES}")

file(GLOB DI_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/kernels/cuda/*.cu)
# The backend table (backend_cuda.c) is C: it gets the project's C flags
# (CMakeLists.txt: DI_WARN, -Werror with DI_WERROR), the nvcc options below
# apply to the .cu files only.
add_library(deepinfer_cuda STATIC ${DI_CUDA_SOURCES} ${CMAKE_SOURCE_DIR}/src/kernels/cuda/backend_cuda.c)
target_include_directories(deepinfer_cuda PUBLIC ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
# -fmad=false: no multiply-add is fused unless the source says fmaf, so the
# elementwise kernels and the dequantizers give the CPU's bits (cuda_kernels.h).
target_compile_options(deepinfer_cuda PRIVATE
                       "$<$<COMPILE_LANGUAGE:CUDA>:-fmad=false;-lineinfo;SHELL:-Xcompiler -ffp-contract=off>"
                       "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Xcompiler -Wall,-Wextra,-Wshadow,-Wno-unused-parameter>")
if(DI_WERROR)
  target_compile_options(deepinfer_cuda PRIVATE
                         "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:--Werror all-warnings;SHELL:-Xcompiler -Werror>")
endif()
set_target_properties(deepinfer_cuda PROPERTIES CUDA_RUNTIME_LIBRARY Static)
# di_dtype_row_bytes / traits come from libdeepinfer (tensor/dtype.c).
target_link_libraries(deepinfer_cuda PUBLIC deepinfer CUDA::cudart_static)

# The kernel test: no cmocka (the binary is carried to a device machine
# whose image has none), --as-needed so it needs no library the CPU
# kernels' objects do not use.
add_executable(test_cuda ${CMAKE_SOURCE_DIR}/tests/kernels/test_cuda.c)
target_include_directories(test_cuda PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(test_cuda PRIVATE deepinfer_cuda)
target_link_options(test_cuda PRIVATE -Wl,--as-needed -static-libstdc++)
add_test(NAME test_cuda COMMAND test_cuda WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(test_cuda PROPERTIES SKIP_RETURN_CODE 77)

# The GEMV/GEMM micro-benchmark (scripts/device-check.sh runs it).
add_executable(bench_cuda ${CMAKE_SOURCE_DIR}/bench/cuda/bench_cuda.c)
target_link_libraries(bench_cuda PRIVATE deepinfer_cuda)
target_link_options(bench_cuda PRIVATE -Wl,--as-needed -static-libstdc++)

# The command gets the CUDA backend: main() registers it (DI_HAVE_CUDA_BACKEND,
# tools/main.c), so --device cuda[:N] reaches di_cuda_ctx_create. The target
# was created before CUDA was enabled, so it has no CUDA_ARCHITECTURES of its
# own. Without CUDA (the return above) none of this happens: the command is
# built as before.
target_link_libraries(deepinfer-cli PRIVATE deepinfer_cuda)
target_compile_definitions(deepinfer-cli PRIVATE DI_HAVE_CUDA_BACKEND)
set_target_properties(deepinfer-cli PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
target_link_options(deepinfer-cli PRIVATE -static-libstdc++)
