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
foreach(_unit aryl-scheduler aryl-agent)
  configure_file(${ARYL_SOURCE_DIR}/deploy/systemd/${_unit}.service.in ${_tmp}/${_unit}.service @ONLY)
endforeach()
file(INSTALL DESTINATION ${_unitdir} TYPE FILE
  FILES ${_tmp}/aryl-scheduler.service ${_tmp}/aryl-agent.service)
file(INSTALL DESTINATION ${_etc}/aryl TYPE FILE
  FILES ${ARYL_SOURCE_DIR}/deploy/etc/aryl.toml ${ARYL_SOURCE_DIR}/deploy/etc/scheduler.env
        ${ARYL_SOURCE_DIR}/deploy/etc/agent.env)
