# Required dependencies (Debian packages, installed by ./dev when missing).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
find_package(cppzmq REQUIRED)
find_package(cxxopts REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(spdlog REQUIRED)
find_package(SQLite3 REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark QUIET)
find_package(prometheus-cpp CONFIG REQUIRED COMPONENTS core)  # Debian: prometheus-cpp-dev
# Eigen (header-only; Debian: libeigen3-dev): the scheduling core fits per-job
# speed models with its Levenberg-Marquardt solver (scheduler/core/src/speed_fit.cc).
find_package(Eigen3 3.3 NO_MODULE)
if(NOT TARGET Eigen3::Eigen)
  message(FATAL_ERROR "Aryl: Eigen 3.3+ not found (Debian package libeigen3-dev; ./dev installs it)")
endif()

# Optional: libtorch (CPU build from Debian's libtorch-dev, with Gloo for c10d).
set(_torch_found OFF)
if(NOT ARYL_WITH_TORCH STREQUAL "OFF")
  find_package(Torch QUIET)
  find_package(Gloo QUIET)
  if(Torch_FOUND AND EXISTS "${TORCH_INSTALL_PREFIX}/include/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp")
    set(_torch_found ON)
  elseif(Torch_FOUND AND EXISTS "/usr/include/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp")
    set(_torch_found ON)
  endif()
endif()
aryl_resolve_option(TORCH _torch_found "libtorch with c10d ProcessGroupGloo (Debian: libtorch-dev libgloo-dev)")

# Gloo's headers, which c10d's ProcessGroupGloo.hpp includes under
# USE_C10D_GLOO: Debian has them (libgloo-dev), PyTorch's wheels do not. Without
# them the runtime is built without its "gloo" backend (NCCL and the fake
# remain) and says so when a job asks for it.
set(ARYL_HAVE_GLOO OFF)
if(ARYL_HAVE_TORCH)
  find_path(ARYL_GLOO_INCLUDE_DIR gloo/algorithm.h HINTS ${TORCH_INCLUDE_DIRS} ${TORCH_INSTALL_PREFIX}/include)
  if(ARYL_GLOO_INCLUDE_DIR AND EXISTS "${ARYL_GLOO_INCLUDE_DIR}/gloo/algorithm.h")
    set(ARYL_HAVE_GLOO ON)
  endif()
endif()

include(ArylFindNccl)  # optional: the CUDA toolkit and NCCL

# Optional: the aryl Python module (pybind11 over the same runtime), for the
# interpreter ARYL_PYTHON whose torch must be the libtorch we build against.
set(_python_found OFF)
if(ARYL_HAVE_TORCH AND NOT ARYL_WITH_PYTHON STREQUAL "OFF" AND EXISTS "${ARYL_PYTHON}")
  set(Python3_EXECUTABLE "${ARYL_PYTHON}")
  find_package(Python3 COMPONENTS Interpreter Development.Module QUIET)
  find_package(pybind11 CONFIG QUIET)
  if(Python3_FOUND AND pybind11_FOUND)
    execute_process(COMMAND "${ARYL_PYTHON}" -c "import torch, os; print(torch.__version__ + ';' + os.path.dirname(torch.__file__))"
      OUTPUT_VARIABLE _py_torch OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _py_torch_rc ERROR_QUIET)
    find_library(ARYL_TORCH_PYTHON_LIBRARY torch_python HINTS ${TORCH_INSTALL_PREFIX}/lib)
    if(_py_torch_rc EQUAL 0 AND ARYL_TORCH_PYTHON_LIBRARY)
      list(GET _py_torch 0 ARYL_PYTHON_TORCH_VERSION)
      list(GET _py_torch 1 ARYL_PYTHON_TORCH_DIR)
      set(_python_found ON)
    endif()
  endif()
endif()
aryl_resolve_option(PYTHON _python_found "${ARYL_PYTHON} with torch, Python headers and pybind11 (Debian: python3-torch pybind11-dev)")
