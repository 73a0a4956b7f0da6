# ARYL_COMM_ONLY=ON: the NCCL communicator layer alone, for stage 1 of the GPU
# check (bench/runtime/gpu-check.sh) on a machine that has CUDA and NCCL and
# none of the project's other dependencies: aryl_comm_nccl and gpu_check,
# from Status (common/src/status.cc), the Communicator interface and the NCCL
# communicator. Nothing else of the project is configured.
find_package(Threads REQUIRED)
if(ARYL_WITH_CUDA STREQUAL "AUTO")
  set(ARYL_WITH_CUDA ON)
endif()
if(ARYL_WITH_NCCL STREQUAL "AUTO")
  set(ARYL_WITH_NCCL ON)
endif()
include(ArylFindNccl)
if(NOT ARYL_HAVE_NCCL)
  message(FATAL_ERROR "ARYL_COMM_ONLY=ON builds the NCCL communicator: ARYL_WITH_NCCL must not be OFF")
endif()

# Status and Result only: the rest of aryl_common needs cxxopts and spdlog.
add_library(aryl_common STATIC ${PROJECT_SOURCE_DIR}/common/src/status.cc)
target_include_directories(aryl_common PUBLIC ${PROJECT_SOURCE_DIR}/common/include)
target_compile_features(aryl_common PUBLIC cxx_std_20)
aryl_warnings(aryl_common)

add_subdirectory(${PROJECT_SOURCE_DIR}/runtime/src/comm/nccl ${CMAKE_BINARY_DIR}/runtime/comm-nccl)
message(STATUS "Aryl: communicator layer only (ARYL_COMM_ONLY): aryl_comm_nccl and gpu_check")
message(STATUS "  CUDA ${CUDAToolkit_VERSION}, NCCL ${NCCL_LIBRARY}")
