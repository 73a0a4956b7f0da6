# The CUDA toolkit and NCCL (compile and link only; no GPU needed to build),
# resolved to ARYL_HAVE_CUDA / ARYL_HAVE_NCCL and the target Aryl::nccl. Used
# by the full build (ArylDependencies.cmake) and by the communicator-only one
# (ArylCommOnly.cmake), which needs nothing else.
set(_cuda_found OFF)
if(NOT ARYL_WITH_CUDA STREQUAL "OFF")
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  set(_cuda_found ${CUDAToolkit_FOUND})
endif()
aryl_resolve_option(CUDA _cuda_found "the CUDA toolkit (set CUDAToolkit_ROOT)")

set(_nccl_found OFF)
if(NOT ARYL_WITH_NCCL STREQUAL "OFF" AND ARYL_HAVE_CUDA)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include ENV NCCL_HOME PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 ENV NCCL_HOME PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(_nccl_found ON)
    if(NOT TARGET Aryl::nccl)
      add_library(Aryl::nccl UNKNOWN IMPORTED)
      set_target_properties(Aryl::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
        INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
    endif()
  endif()
endif()
aryl_resolve_option(NCCL _nccl_found "NCCL (nccl.h and libnccl; needs the CUDA toolkit)")
