# Tri-state options: AUTO (use when found), ON (configure error when missing), OFF.
set(ARYL_WITH_TORCH AUTO CACHE STRING "Build the libtorch runtime and examples (AUTO|ON|OFF)")
set(ARYL_WITH_CUDA AUTO CACHE STRING "Use the CUDA toolkit (AUTO|ON|OFF)")
set(ARYL_WITH_NCCL AUTO CACHE STRING "Build the NCCL communicator (AUTO|ON|OFF)")
set_property(CACHE ARYL_WITH_TORCH PROPERTY STRINGS AUTO ON OFF)
set_property(CACHE ARYL_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set_property(CACHE ARYL_WITH_NCCL PROPERTY STRINGS AUTO ON OFF)
set(ARYL_WITH_PYTHON AUTO CACHE STRING "Build the aryl Python module (AUTO|ON|OFF; python3-torch pybind11-dev)")
set_property(CACHE ARYL_WITH_PYTHON PROPERTY STRINGS AUTO ON OFF)
# The interpreter whose torch the module is built for: Debian's, whose torch uses
# the same libtorch as libtorch-dev (another python3 may come first on PATH).
set(ARYL_PYTHON /usr/bin/python3 CACHE FILEPATH "Python interpreter with torch for the aryl module")
option(ARYL_COMM_ONLY "Build only the NCCL communicator layer and gpu_check (needs CUDA and NCCL, nothing else)" OFF)
option(ARYL_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(ARYL_FUZZ "Build libFuzzer targets (clang only)" OFF)

if(ARYL_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# Warnings for the project's own targets (not for third-party code).
function(aryl_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
endfunction()

# aryl_torch_pch(TARGET [SOURCES_WITHOUT_TORCH...]): the target's files share a
# precompiled <torch/torch.h>; the files listed do not include libtorch and
# are compiled without it. ARYL_TORCH_PCH=OFF turns it off.
option(ARYL_TORCH_PCH "Precompile <torch/torch.h> for the libtorch-heavy targets" ON)
function(aryl_torch_pch target)
  if(NOT ARYL_TORCH_PCH)
    return()
  endif()
  target_precompile_headers(${target} PRIVATE <torch/torch.h>)
  if(ARGN)
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
  endif()
endfunction()

# aryl_reuse_torch_pch(TARGET [SOURCES_WITHOUT_TORCH...]): an executable that
# includes libtorch reuses the one precompiled <torch/torch.h> of
# aryl_torch_pch_host (runtime/CMakeLists.txt) instead of parsing it per file
# (about 40 s a file on the 2-core development machine) or building its own.
# Executables only: they share its -fPIE (a library's -fPIC would not match).
function(aryl_reuse_torch_pch target)
  if(NOT ARYL_TORCH_PCH OR NOT TARGET aryl_torch_pch_host)
    return()
  endif()
  target_precompile_headers(${target} REUSE_FROM aryl_torch_pch_host)
  if(ARGN)
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
  endif()
endfunction()

# aryl_optional(NAME FOUND_VAR WHAT_IS_MISSING): resolves ARYL_WITH_<NAME> to ARYL_HAVE_<NAME>.
macro(aryl_resolve_option name found missing)
  if(ARYL_WITH_${name} STREQUAL "OFF")
    set(ARYL_HAVE_${name} OFF)
  elseif(${found})
    set(ARYL_HAVE_${name} ON)
  elseif(ARYL_WITH_${name} STREQUAL "ON")
    message(FATAL_ERROR "ARYL_WITH_${name}=ON but ${missing} was not found")
  else()
    set(ARYL_HAVE_${name} OFF)
  endif()
endmacro()
set(ARYL_GIT_COMMIT "" CACHE STRING "Commit reported by --version (default: git rev-parse of the source tree)")
