# Install rules for everything outside the runtime (runtime/CMakeLists.txt
# installs the runtime library, its headers, its CMake package and
# aryl-rt-launch), and the Debian package (CPack).
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

foreach(_bin aryl-scheduler aryl-agent aryl-run aryl aryl-sim)
  if(TARGET ${_bin})
    install(TARGETS ${_bin} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)
  endif()
endforeach()

install(FILES README.md LICENSE DESTINATION ${ARYL_INSTALL_DOCDIR} COMPONENT tools)
install(DIRECTORY docs/ DESTINATION ${ARYL_INSTALL_DOCDIR} COMPONENT tools)
install(FILES deploy/grafana/aryl-cluster.json DESTINATION ${CMAKE_INSTALL_DATADIR}/aryl/grafana COMPONENT tools)
install(FILES deploy/systemd/aryl.sysusers.conf DESTINATION lib/sysusers.d
  RENAME aryl.conf COMPONENT tools)

if(TARGET aryl)
  install(FILES ${CMAKE_BINARY_DIR}/cli/completion/aryl.bash
    DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME aryl COMPONENT tools)
  install(FILES ${CMAKE_BINARY_DIR}/cli/completion/_aryl
    DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions COMPONENT tools)
endif()

# /etc/aryl and the units: placed at install time from the prefix then in force.
install(CODE "set(ARYL_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(ARYL_INSTALL_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(ARYL_INSTALL_DOCDIR \"${ARYL_INSTALL_DOCDIR}\")
  set(ARYL_BINARY_DIR \"${PROJECT_BINARY_DIR}\")" COMPONENT tools)
install(SCRIPT ${PROJECT_SOURCE_DIR}/cmake/ArylInstallSystem.cmake COMPONENT tools)

# ---- Debian package ---------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME aryl)
set(CPACK_PACKAGE_VENDOR "Aryl")
set(CPACK_PACKAGE_CONTACT "Aryl maintainers <aryl@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Elastic GPU cluster scheduler: scheduler, agent, CLI, simulator, training runtime")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
# Dependencies from the ELF files (dpkg-shlibdeps): libzmq5, libsqlite3-0,
# Debian's libtorch when the runtime is built, ... A build against a CUDA
# toolkit or NCCL outside Debian (/usr/local/cuda) has no Debian package to
# depend on: dependencies are then not computed (./dev package builds without).
if(ARYL_HAVE_CUDA OR ARYL_HAVE_NCCL)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
else()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
endif()
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "gnuplot-nox, prometheus")
configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/postinst ${CMAKE_BINARY_DIR}/debian/postinst COPYONLY)
configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/conffiles ${CMAKE_BINARY_DIR}/debian/conffiles COPYONLY)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA "${CMAKE_BINARY_DIR}/debian/postinst;${CMAKE_BINARY_DIR}/debian/conffiles")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
