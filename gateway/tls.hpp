// TLS for the gateway: a server context from a PEM certificate chain and its private key, for
// deployments without a terminating proxy in front of dynrt (docs/operations.md, "TLS").
//
// load_tls_context() reads the files each time it is called (at start, and again on a reload)
// and may be called from any thread. The context it returns is never changed afterwards: a
// reload makes a new one, connections keep the one they were accepted with, and OpenSSL may
// use one context from every I/O thread at once.
#pragma once

#include "engines/http/server_core.hpp"
#include "runtime/expected.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <memory>
#include <string>

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace dynrt::gateway {

struct TlsContext {
  std::shared_ptr<boost::asio::ssl::context> context;
  std::string certificate;  // "subject CN=..., valid until ...": what an operator is told
};

// TLS 1.2 or later, no renegotiation. The error names the file and what is wrong with it: it
// cannot be read, holds no PEM certificate or key, the key is encrypted (it would need a
// passphrase at every start), the key does not match the certificate, or the certificate has
// expired (no verifying client would accept it).
Expected<TlsContext> load_tls_context(const std::string& cert_file, const std::string& key_file);

// An accepted connection as a TLS server stream for the HTTP server core: it shakes hands
// before the first request and ends with a close_notify. It holds `context` for as long as it
// lives, so a reload never pulls the context from under an open connection.
std::unique_ptr<engines::HttpTransport> tls_transport(
    boost::asio::ip::tcp::socket socket, std::shared_ptr<boost::asio::ssl::context> context);

}  // namespace dynrt::gateway
