# Script mode (cmake -P), run on every build: writes OUT from IN with the
# current git commit. configure_file leaves OUT untouched when nothing changed,
# so a build without a new commit recompiles nothing.
#   -DIN=... -DOUT=... -DSRC=<source dir> -DARYL_VERSION=... -DARYL_BI_TORCH=true|false ...
if(NOT ARYL_GIT_COMMIT)
  set(ARYL_GIT_COMMIT unknown)
  find_program(_git git)
  if(_git)
    execute_process(COMMAND ${_git} -C ${SRC} rev-parse --short=12 HEAD
      OUTPUT_VARIABLE _commit OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
    if(_rc EQUAL 0 AND _commit)
      set(ARYL_GIT_COMMIT ${_commit})
      execute_process(COMMAND ${_git} -C ${SRC} diff --quiet HEAD -- RESULT_VARIABLE _dirty ERROR_QUIET)
      if(NOT _dirty EQUAL 0)
        string(APPEND ARYL_GIT_COMMIT "+dirty")
      endif()
    endif()
  endif()
endif()
configure_file(${IN} ${OUT} @ONLY)
