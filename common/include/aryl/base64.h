// Base64 (RFC 4648, standard alphabet, padded): the protocol's bytes fields
// and etcd's JSON gateway, which encodes keys and values so.
#pragma once

#include <string>
#include <string_view>

namespace aryl {

std::string Base64Encode(std::string_view in);
// False for a length that is not a multiple of 4, a character outside the
// alphabet, or data after the padding.
bool Base64Decode(std::string_view in, std::string* out);

}  // namespace aryl
