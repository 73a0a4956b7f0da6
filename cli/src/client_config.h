// Client settings for `aryl` and `aryl-run`, layered as kubectl does with
// kubeconfig (later wins):
//   1. built-in defaults (ipc:///run/aryl/scheduler.sock, no CURVE, 3 s timeout)
//   2. /etc/aryl/aryl.toml
//   3. ~/.config/aryl/config ($XDG_CONFIG_HOME/aryl/config)
//      ($ARYL_CONFIG=FILE replaces 2 and 3 with FILE)
//   4. $ARYL_SCHEDULER, $ARYL_CURVE_KEY, $ARYL_CURVE_SERVER_KEY
//   5. flags (--scheduler, --curve-key, --curve-server-key, --timeout)
// The files hold `key = "value"` lines (a TOML subset): scheduler, curve_key,
// curve_server_key, timeout; `#` starts a comment. Anything else is an error
// naming file:line. `scheduler` (like $ARYL_SCHEDULER and --scheduler) is one
// endpoint or, for a highly available install, every scheduler as a comma
// list ("tcp://a:7117,tcp://b:7117"): requests go to whichever leads.
#pragma once

#include <string>

#include "aryl/protocol/transport.h"
#include "aryl/result.h"

namespace aryl::cli {

struct ClientSettings {
  std::string scheduler = protocol::kDefaultSchedulerEndpoint;  // one endpoint or a comma list
  std::string curve_key;
  std::string curve_server_key;
  double timeout = 3;
};

// Applies one config file's text to `settings`; `path` is for messages.
Status ApplyConfigText(const std::string& text, const std::string& path, ClientSettings& settings);

// Layers 1 to 4 above.
Result<ClientSettings> LoadClientSettings();

// LoadClientSettings() once per process; a bad file is a usage error (exit 2).
const ClientSettings& ClientDefaultsOrExit(const std::string& program);

}  // namespace aryl::cli
