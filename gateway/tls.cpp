#include "gateway/tls.hpp"

#include "engines/read_file.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <cstddef>
#include <string>

namespace dynrt::gateway {

namespace {

// A certificate chain or a key file is a few KB; a megabyte holds any real chain.
constexpr std::size_t kMaxPemBytes = std::size_t{1} << 20;

// OpenSSL's reason for the first failure it queued ("no start line"), then a clean queue.
std::string openssl_reason() {
  const unsigned long e = ERR_peek_error();
  const char* reason = e != 0 ? ERR_reason_error_string(e) : nullptr;
  ERR_clear_error();
  return reason != nullptr ? reason : "unknown OpenSSL error";
}

// OpenSSL's own messages for a file it cannot open are about its system library, not the file;
// and a device that never ends (/dev/zero) is refused at the limit rather than read for ever.
Expected<std::string> read_pem(const std::string& what, const std::string& path) {
  return engines::read_bounded(path, kMaxPemBytes, "TLS " + what);
}

bool has(const std::string& text, const char* marker) {
  return text.find(marker) != std::string::npos;
}

std::string describe(const X509* cert) {
  BIO* out = BIO_new(BIO_s_mem());
  if (out == nullptr) return {};
  BIO_puts(out, "subject ");
  X509_NAME_print_ex(out, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
  BIO_puts(out, ", valid until ");
  ASN1_TIME_print(out, X509_get0_notAfter(cert));
  char* data = nullptr;
  const long n = BIO_get_mem_data(out, &data);
  std::string s(data, n > 0 ? static_cast<std::size_t>(n) : 0);
  BIO_free(out);
  return s;
}

namespace beast = boost::beast;
namespace net = boost::asio;

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

class TlsTransport final : public engines::BeastTransport<TlsStream> {
 public:
  TlsTransport(net::ip::tcp::socket socket, std::shared_ptr<net::ssl::context> context)
      : BeastTransport(TlsStream(std::move(socket), *context)), context_(std::move(context)) {}

  bool secure() const override { return true; }
  void handshake(Done done) override {
    stream_.async_handshake(net::ssl::stream_base::server, std::move(done));
  }
  void shutdown(Done done) override { stream_.async_shutdown(std::move(done)); }
  bool client_closed(const beast::error_code& ec) const override {
    return ec == net::ssl::error::stream_truncated || BeastTransport::client_closed(ec);
  }

 private:
  std::shared_ptr<net::ssl::context> context_;
};

// An encrypted key would make OpenSSL ask for its passphrase on the terminal; refuse it instead.
int no_passphrase(char*, int, int, void*) {
  return 0;
}

}  // namespace

Expected<TlsContext> load_tls_context(const std::string& cert_file, const std::string& key_file) {
  namespace ssl = boost::asio::ssl;
  const auto cert_text = read_pem("certificate", cert_file);
  if (!cert_text) return cert_text.error();
  const auto key_text = read_pem("key", key_file);
  if (!key_text) return key_text.error();
  const char* swapped = " (are the certificate and the key the other way round?)";
  if (!has(*cert_text, "-----BEGIN CERTIFICATE-----"))
    return make_error("the TLS certificate " + cert_file +
                      " holds no PEM certificate (a -----BEGIN CERTIFICATE----- block)" +
                      (has(*cert_text, "PRIVATE KEY-----") ? swapped : ""));
  if (has(*key_text, "ENCRYPTED"))
    return make_error("the TLS key " + key_file +
                      " is encrypted, and dynrt cannot ask for its passphrase; store it "
                      "decrypted, readable only by dynrt's user");
  if (!has(*key_text, "PRIVATE KEY-----"))
    return make_error("the TLS key " + key_file +
                      " holds no PEM private key (a -----BEGIN PRIVATE KEY----- block)" +
                      (has(*key_text, "-----BEGIN CERTIFICATE-----") ? swapped : ""));
  ERR_clear_error();

  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                       ssl::context::single_dh_use);
  SSL_CTX* ctx = context->native_handle();
  // Renegotiation would let a client make the server do handshakes over and over on one
  // connection.
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
      SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION) == 0)
    return make_error("cannot set up TLS: " + openssl_reason());
  SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);

  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1)
    return make_error("the TLS certificate " + cert_file + " is not a usable certificate chain (" +
                      openssl_reason() + ")");
  const X509* leaf = SSL_CTX_get0_certificate(ctx);
  if (leaf == nullptr)
    return make_error("the TLS certificate " + cert_file + " holds no certificate");

  BIO* in = BIO_new_mem_buf(key_text->data(), static_cast<int>(key_text->size()));
  EVP_PKEY* key =
      in != nullptr ? PEM_read_bio_PrivateKey(in, nullptr, no_passphrase, nullptr) : nullptr;
  BIO_free(in);
  if (key == nullptr)
    return make_error("the TLS key " + key_file + " is not a usable private key (" +
                      openssl_reason() + ")");
  const bool matches = X509_check_private_key(leaf, key) == 1;
  ERR_clear_error();
  const bool used = matches && SSL_CTX_use_PrivateKey(ctx, key) == 1;
  EVP_PKEY_free(key);
  if (!matches)
    return make_error("the TLS key " + key_file + " does not match the certificate " + cert_file);
  if (!used) return make_error("cannot use the TLS key " + key_file + ": " + openssl_reason());

  if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0)
    return make_error("the TLS certificate " + cert_file + " has expired (" + describe(leaf) + ")");
  return TlsContext{std::move(context), describe(leaf)};
}

std::unique_ptr<engines::HttpTransport> tls_transport(net::ip::tcp::socket socket,
                                                      std::shared_ptr<net::ssl::context> context) {
  return std::make_unique<TlsTransport>(std::move(socket), std::move(context));
}

}  // namespace dynrt::gateway
