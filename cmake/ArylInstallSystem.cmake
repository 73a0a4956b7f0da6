# Runs at install time (install(SCRIPT) from ArylInstall.cmake): installs the
# client and daemon configuration and the systemd units for the prefix then in
# force. DESTDIR is honoured by file(INSTALL).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr" OR CMAKE_INSTALL_PREFIX STREQUAL "/")
  set(_etc /etc)
  set(_unitdir /usr/lib/systemd/system)
else()
  set(_etc ${CMAKE_INSTALL_PREFIX}/etc)
  set(_unitdir ${CMAKE_INSTALL_PREFIX}/lib/systemd/system)
endif()
# The units read their env files where this install put them.
set(ARYL_ETCDIR ${_etc})
set(ARYL_BINDIR ${CMAKE_INSTALL_PREFIX}/${ARYL_INSTALL_BINDIR})
set(ARYL_DOCDIR ${CMAKE_INSTALL_PREFIX}/${ARYL_INSTALL_DOCDIR})
set(_tmp ${ARYL_BINARY_DIR}/deploy/systemd)
# One part per package (ArylInstall.cmake): each daemon's unit and env file,
# the client's aryl.toml.
if(ARYL_SYSTEM_PART STREQUAL "scheduler" OR ARYL_SYSTEM_PART STREQUAL "agent")
  set(_unit aryl-${ARYL_SYSTEM_PART})
  configure_file(${ARYL_SOURCE_DIR}/deploy/systemd/${_unit}.service.in ${_tmp}/${_unit}.service @ONLY)
  file(INSTALL DESTINATION ${_unitdir} TYPE FILE FILES ${_tmp}/${_unit}.service)
  file(INSTALL DESTINATION ${_etc}/aryl TYPE FILE FILES ${ARYL_SOURCE_DIR}/deploy/etc/${ARYL_SYSTEM_PART}.env)
  if(ARYL_SYSTEM_PART STREQUAL "scheduler")
    # An example teams file; read only with --queues (docs/operations.md, "Teams").
    file(INSTALL DESTINATION ${_etc}/aryl TYPE FILE FILES ${ARYL_SOURCE_DIR}/deploy/etc/queues.csv)
  endif()
elseif(ARYL_SYSTEM_PART STREQUAL "tools")
  file(INSTALL DESTINATION ${_etc}/aryl TYPE FILE FILES ${ARYL_SOURCE_DIR}/deploy/etc/aryl.toml)
endif()
