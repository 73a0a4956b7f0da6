# Install rules for everything outside the runtime (runtime/CMakeLists.txt
# installs the runtime library, its headers, its CMake package and
# aryl-rt-launch), and the Debian packages (CPack, one per component).
#
#   cmake --install build --prefix /usr    # or: ./dev package
#
# Files under /etc and the systemd units follow the prefix at install time:
# prefix /usr puts them at /etc/aryl and /usr/lib/systemd/system, any other
# prefix P at P/etc/aryl and P/lib/systemd/system. The units always use the
# standard state, log and config directories /var/lib/aryl, /var/log/aryl and
# /etc/aryl (systemd's StateDirectory=, LogsDirectory=, ConfigurationDirectory=).
include(GNUInstallDirs)
# Installing (and cpack, which installs first) takes what is built and never
# rebuilds: the packaging test runs cpack on the build tree the other tests use.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)
set(ARYL_INSTALL_DOCDIR ${CMAKE_INSTALL_DATADIR}/doc/aryl)

# Components, one Debian package each (a head node needs no libtorch):
#   scheduler: aryl-scheduler, aryl-sim, its unit, scheduler.env, queues.csv, the aryl account
#   agent:     aryl-agent, its unit, agent.env
#   tools:     aryl, aryl-run, completions, aryl.toml, the docs
#   runtime:   aryl-rt-launch and the Python module (runtime/CMakeLists.txt)
#   dev:       the runtime's headers, static libraries and CMake package
set(_aryl_bin_component_aryl-scheduler scheduler)
set(_aryl_bin_component_aryl-sim scheduler)
set(_aryl_bin_component_aryl-agent agent)
set(_aryl_bin_component_aryl-run tools)
set(_aryl_bin_component_aryl tools)
foreach(_bin aryl-scheduler aryl-agent aryl-run aryl aryl-sim)
  if(TARGET ${_bin})
    install(TARGETS ${_bin} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT ${_aryl_bin_component_${_bin}})
  endif()
endforeach()

install(FILES README.md LICENSE DESTINATION ${ARYL_INSTALL_DOCDIR} COMPONENT tools)
install(DIRECTORY docs/ DESTINATION ${ARYL_INSTALL_DOCDIR} COMPONENT tools)
install(FILES deploy/grafana/aryl-cluster.json DESTINATION ${CMAKE_INSTALL_DATADIR}/aryl/grafana COMPONENT scheduler)
install(FILES deploy/systemd/aryl.sysusers.conf DESTINATION lib/sysusers.d
  RENAME aryl.conf COMPONENT scheduler)

if(TARGET aryl)
  install(FILES ${CMAKE_BINARY_DIR}/cli/completion/aryl.bash
    DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME aryl COMPONENT tools)
  install(FILES ${CMAKE_BINARY_DIR}/cli/completion/_aryl
    DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions COMPONENT tools)
endif()

# /etc/aryl and the units: placed at install time from the prefix then in
# force, each file with its component (ARYL_SYSTEM_PART).
foreach(_part scheduler agent tools)
  install(CODE "set(ARYL_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
    set(ARYL_INSTALL_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
    set(ARYL_INSTALL_DOCDIR \"${ARYL_INSTALL_DOCDIR}\")
    set(ARYL_BINARY_DIR \"${PROJECT_BINARY_DIR}\")
    set(ARYL_SYSTEM_PART ${_part})" COMPONENT ${_part})
  install(SCRIPT ${PROJECT_SOURCE_DIR}/cmake/ArylInstallSystem.cmake COMPONENT ${_part})
endforeach()

# ---- Debian package ---------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL scheduler agent tools runtime dev)
set(CPACK_PACKAGE_NAME aryl)
set(CPACK_PACKAGE_VENDOR "Aryl")
set(CPACK_PACKAGE_CONTACT "Aryl maintainers <aryl@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Elastic GPU cluster scheduler")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
# Dependencies from the ELF files (dpkg-shlibdeps), per package: libzmq5,
# libsqlite3-0, and Debian's libtorch only for the agent and runtime packages.
# A build against a CUDA toolkit or NCCL outside Debian (/usr/local/cuda) has
# no Debian package to depend on: dependencies are then not computed
# (./dev package builds without).
if(ARYL_HAVE_CUDA OR ARYL_HAVE_NCCL)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
else()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
endif()
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_SCHEDULER_PACKAGE_NAME aryl-scheduler)
set(CPACK_DEBIAN_AGENT_PACKAGE_NAME aryl-agent)
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME aryl)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME aryl-runtime)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME aryl-dev)
set(CPACK_COMPONENT_SCHEDULER_DESCRIPTION "Aryl scheduler daemon and trace-driven simulator (head node)")
set(CPACK_COMPONENT_AGENT_DESCRIPTION "Aryl agent: runs the workers on a GPU server")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "Aryl command-line tools (aryl, aryl-run) and documentation")
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "Aryl training runtime: aryl-rt-launch and the Python module")
set(CPACK_COMPONENT_DEV_DESCRIPTION "Aryl training runtime: headers, static libraries, CMake package")
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_SCHEDULER_PACKAGE_SUGGESTS "aryl, gnuplot-nox, prometheus")
set(CPACK_DEBIAN_AGENT_PACKAGE_SUGGESTS "aryl-runtime")
set(CPACK_COMPONENT_DEV_DEPENDS runtime)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Maintainer scripts and conffiles per package: the aryl account for the
# scheduler; daemon-reload for both daemons.
foreach(_part scheduler agent tools)
  set(_dir ${CMAKE_BINARY_DIR}/debian/${_part})
  file(MAKE_DIRECTORY ${_dir})
  file(STRINGS ${PROJECT_SOURCE_DIR}/deploy/debian/conffiles _all)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/deploy/debian/conffiles)
  set(_mine "")
  foreach(_f ${_all})
    if((_part STREQUAL "scheduler" AND _f MATCHES "(scheduler\\.env|queues\\.csv)$") OR
       (_part STREQUAL "agent" AND _f MATCHES "agent\\.env$") OR
       (_part STREQUAL "tools" AND _f MATCHES "aryl\\.toml$"))
      string(APPEND _mine "${_f}\n")
    endif()
  endforeach()
  file(WRITE ${_dir}/conffiles "${_mine}")
  string(TOUPPER ${_part} _P)
  set(CPACK_DEBIAN_${_P}_PACKAGE_CONTROL_EXTRA "${_dir}/conffiles")
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/postinst ${CMAKE_BINARY_DIR}/debian/scheduler/postinst COPYONLY)
configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/postinst-agent ${CMAKE_BINARY_DIR}/debian/agent/postinst COPYONLY)
list(APPEND CPACK_DEBIAN_SCHEDULER_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/debian/scheduler/postinst)
list(APPEND CPACK_DEBIAN_AGENT_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/debian/agent/postinst)
include(CPack)
