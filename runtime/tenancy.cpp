#include "runtime/tenancy.hpp"

namespace dynrt::tenancy {

namespace {

// Scopes are told apart by their first character, and a tenant's name is length-prefixed, so
// no tenant name and no record key can make one scope's key equal another's.
std::string tenant_record(std::string_view tenant, std::string_view key) {
  std::string out = "t";
  out += std::to_string(tenant.size());
  out += ':';
  out += tenant;
  out += key;
  return out;
}
std::string shared_record(std::string_view key) {
  return "g:" + std::string(key);
}
std::string every_record(std::string_view key) {
  return "*:" + std::string(key);
}

}  // namespace

Hash128 tenant_name(const Hash128& name, std::string_view tenant) {
  if (tenant.empty()) return name;
  Hasher128 h;
  h.add(name).add("dynrt.tenant.v1").add(tenant);
  return h.finish();
}

std::vector<std::string> read_records(std::span<const std::string> keys, std::string_view tenant,
                                      bool shared) {
  std::vector<std::string> out;
  out.reserve(keys.size() * 2);
  for (const auto& k : keys) {
    out.push_back(shared ? shared_record(k) : tenant_record(tenant, k));
    out.push_back(every_record(k));
  }
  return out;
}

std::vector<std::string> write_records(std::span<const std::string> keys, const WriteScope& scope) {
  std::vector<std::string> out;
  out.reserve(keys.size() * 2);
  for (const auto& k : keys) {
    if (scope.everywhere) {
      out.push_back(every_record(k));
    } else {
      out.push_back(tenant_record(scope.tenant, k));
      out.push_back(shared_record(k));
    }
  }
  return out;
}

}  // namespace dynrt::tenancy
