// The gateway over TLS: a Gateway on port 0 with a self-signed certificate made here with the
// OpenSSL API (into a temporary folder; no key material is committed), spoken to by a Beast
// client that verifies it. Everything the plain gateway does must hold over TLS: calls, SSE,
// keep-alive, the request deadline, the idle timeout, the connection cap, disconnects, stop;
// and what only TLS has: the handshake deadline, plain HTTP refused, bad files refused, reload.
// Every client operation is bounded by a 10 s expiry, which turns a hang into a failure.
#include "gateway/tls.hpp"
#include "engines/sim/engine.hpp"
#include "gateway/server.hpp"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace dynrt::gateway {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
namespace fs = std::filesystem;
using tcp = net::ip::tcp;
using nlohmann::json;

// -- certificates -------------------------------------------------------------------------------

using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using CertPtr = std::unique_ptr<X509, decltype(&X509_free)>;

KeyPtr make_key() {
  return KeyPtr(EVP_EC_gen("P-256"), EVP_PKEY_free);
}

// Self-signed for localhost and 127.0.0.1, valid from an hour ago for `days` (negative: it
// expired that many days ago).
CertPtr make_cert(EVP_PKEY* key, const std::string& common_name, long days) {
  CertPtr cert(X509_new(), X509_free);
  X509_set_version(cert.get(), 2);
  static long serial = 0;
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), ++serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), days > 0 ? -3600 : (days - 1) * 86400);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), days * 86400);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(cert.get(), name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  X509_EXTENSION* san =
      X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1");
  X509_add_ext(cert.get(), san, -1);
  X509_EXTENSION_free(san);
  X509_sign(cert.get(), key, EVP_sha256());
  return cert;
}

void write_cert(const fs::path& path, X509* cert) {
  BIO* out = BIO_new_file(path.c_str(), "w");
  PEM_write_bio_X509(out, cert);
  BIO_free(out);
}

// `passphrase`: written encrypted with it.
void write_key(const fs::path& path, EVP_PKEY* key, const std::string& passphrase = {}) {
  BIO* out = BIO_new_file(path.c_str(), "w");
  PEM_write_bio_PrivateKey(
      out, key, passphrase.empty() ? nullptr : EVP_aes_128_cbc(),
      passphrase.empty() ? nullptr : reinterpret_cast<const unsigned char*>(passphrase.data()),
      static_cast<int>(passphrase.size()), nullptr, nullptr);
  BIO_free(out);
}

// A temporary folder with a certificate and its key, removed at the end.
class TempDir {
 public:
  TempDir() {
    static int n = 0;
    path_ = fs::temp_directory_path() /
            ("dynrt-tls-test-" + std::to_string(::getpid()) + "-" + std::to_string(++n));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// -- a client ---------------------------------------------------------------------------------

using Response = http::response<http::string_body>;

// One TLS connection to the gateway that trusts only the certificates in `trusted` and checks
// that the server's is for localhost. Each operation runs the client's own io_context until it
// completes, within the 10 s expiry.
class TlsClient {
 public:
  TlsClient(std::uint16_t port, const std::vector<fs::path>& trusted)
      : context_(ssl::context::tls_client), stream_(ioc_, context_) {
    for (const auto& t : trusted)
      context_.load_verify_file(t.string());
    stream_.set_verify_mode(ssl::verify_peer);
    SSL_set1_host(stream_.native_handle(), "localhost");
    connected_ = !run([&](auto done) {
      beast::get_lowest_layer(stream_).async_connect(
          tcp::endpoint(net::ip::address_v4::loopback(), port), done);
    });
  }

  bool connected() const { return connected_; }
  ssl::context& context() { return context_; }
  SSL* ssl() { return stream_.native_handle(); }

  beast::error_code handshake() {
    return run([&](auto done) { stream_.async_handshake(ssl::stream_base::client, done); });
  }
  beast::error_code send(const std::string& bytes) {
    return run([&](auto done) { net::async_write(stream_, net::buffer(bytes), done); });
  }
  beast::error_code write(http::request<http::string_body> req) {
    req.prepare_payload();
    return run([&](auto done) { http::async_write(stream_, req, done); });
  }
  Response exchange(http::request<http::string_body> req) {
    const beast::error_code ec = write(std::move(req));
    EXPECT_FALSE(ec) << ec.message();
    return read();
  }
  // The next response, chunked or not; status 0 when the connection ended first.
  Response read() {
    Response res;
    last_error = run([&](auto done) { http::async_read(stream_, buffer_, res, done); });
    if (last_error) res.result(http::status::unknown);
    return res;
  }
  // Reads until the server ends the connection; its way of ending it (net::error::eof after a
  // close_notify) or beast::error::timeout after 10 s.
  beast::error_code read_to_end() {
    std::string ignored;
    return run([&](auto done) { net::async_read(stream_, net::dynamic_buffer(ignored), done); });
  }
  // Sends a close_notify and gives the server `wait` to answer it; then the socket is closed.
  void shutdown(std::chrono::milliseconds wait) {
    run([&](auto done) { stream_.async_shutdown(done); }, wait);
    beast::get_lowest_layer(stream_).close();
  }
  // The raw TCP connection, for clients that do not speak TLS.
  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream_); }
  // What the server sends on it until it closes it (then last_error is net::error::eof).
  std::string read_raw_to_end() {
    std::string out;
    last_error = run([&](auto done) { net::async_read(tcp(), net::dynamic_buffer(out), done); });
    return out;
  }

  beast::error_code last_error;

  template <class Start>
  beast::error_code run(Start start, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    beast::error_code result = net::error::would_block;
    tcp().expires_after(limit);
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    ioc_.restart();
    ioc_.run();
    return result;
  }

 private:
  net::io_context ioc_;
  ssl::context context_;
  beast::ssl_stream<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
  bool connected_ = false;
};

http::request<http::string_body> chat(bool stream, bool keep_alive = true, int max_tokens = 4) {
  http::request<http::string_body> req(http::verb::post, "/v1/chat/completions", 11);
  req.set(http::field::host, "localhost");
  req.set(http::field::content_type, "application/json");
  req.keep_alive(keep_alive);
  req.body() = json{{"model", "sim"},
                    {"max_tokens", max_tokens},
                    {"stream", stream},
                    {"messages", {{{"role", "user"}, {"content", "hi"}}}}}
                   .dump();
  return req;
}

std::string subject_of(SSL* ssl) {
  X509* peer = SSL_get1_peer_certificate(ssl);
  if (peer == nullptr) return {};
  char name[256] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, name, sizeof name);
  X509_free(peer);
  return name;
}

// -- the gateway --------------------------------------------------------------------------------

class TlsGateway : public ::testing::Test {
 protected:
  void SetUp() override {
    KeyPtr key = make_key();
    CertPtr cert = make_cert(key.get(), "dynrt-test", 2);
    write_cert(cert_, cert.get());
    write_key(key_, key.get());
  }
  // `time_scale`: the simulated engine's (0: calls finish at once; 1000: real time).
  void start(GatewayOptions o = {}, double time_scale = 0) {
    engines::sim::SimEngineOptions so;
    so.time_scale = time_scale;
    engine_ = std::make_shared<engines::sim::SimEngine>(engines::sim::SimParams{},
                                                        engines::sim::Script{}, so);
    RuntimeConfig cfg;
    cfg.engines.push_back({"sim", engine_, {}});
    cfg.template_paths = {"templates"};
    auto rt = Runtime::create(cfg);
    ASSERT_TRUE(rt.ok()) << rt.error().message;
    runtime_ = std::move(*rt);
    o.tls_cert = cert_.string();
    o.tls_key = key_.string();
    auto gw = Gateway::create(*runtime_, std::move(o));
    ASSERT_TRUE(gw.ok()) << gw.error().message;
    gateway_ = std::move(*gw);
    ASSERT_TRUE(gateway_->tls());
  }
  void TearDown() override {
    gateway_.reset();
    if (runtime_) runtime_->shutdown();
  }
  std::unique_ptr<TlsClient> client() {
    auto c = std::make_unique<TlsClient>(gateway_->port(), std::vector<fs::path>{cert_});
    EXPECT_TRUE(c->connected());
    return c;
  }
  std::unique_ptr<TlsClient> handshaken() {
    auto c = client();
    const beast::error_code ec = c->handshake();
    EXPECT_FALSE(ec) << ec.message();
    return c;
  }
  // Waits for something the gateway does on its own threads, up to 10 s.
  template <class Pred>
  static bool eventually(Pred done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return done();
  }

  TempDir dir_;
  fs::path cert_ = dir_ / "cert.pem";
  fs::path key_ = dir_ / "key.pem";
  std::shared_ptr<engines::sim::SimEngine> engine_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<Gateway> gateway_;
};

TEST_F(TlsGateway, ACallIsServedToAClientThatVerifiesTheCertificate) {
  start();
  auto c = handshaken();
  EXPECT_GE(SSL_version(c->ssl()), TLS1_2_VERSION);
  EXPECT_EQ(subject_of(c->ssl()), "dynrt-test");
  const Response r = c->exchange(chat(false, false));
  EXPECT_EQ(r.result_int(), 200) << r.body();
  EXPECT_TRUE(json::parse(r.body(), nullptr, false).contains("choices")) << r.body();
  EXPECT_EQ(runtime_->stats().requests, 1u);
}

TEST_F(TlsGateway, AStreamedCallArrivesWholeAsChunkedSse) {
  start();
  auto c = handshaken();
  const Response r = c->exchange(chat(true, false, 16));
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_TRUE(r.chunked());
  EXPECT_EQ(r[http::field::content_type], "text/event-stream");
  const std::string& body = r.body();
  EXPECT_EQ(body.rfind("data: {", 0), 0u) << body;
  ASSERT_GE(body.size(), 14u);
  EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n");
  // The server ends the connection in order: a close_notify, read as the end of the stream.
  EXPECT_EQ(c->read_to_end(), net::error::eof);
}

TEST_F(TlsGateway, AKeptAliveConnectionServesSeveralRequests) {
  start();
  auto c = handshaken();
  for (const bool stream : {false, true, false}) {
    const Response r = c->exchange(chat(stream));
    EXPECT_EQ(r.result_int(), 200) << r.body();
    EXPECT_TRUE(r.keep_alive());
  }
  EXPECT_EQ(runtime_->stats().requests, 3u);
}

// Two requests in two TLS records that reach the server in one TCP segment (corked): the
// server's first read takes both records off the socket but decrypts only the first, so the
// second waits inside the TLS stream, and the socket never becomes readable for it.
TEST_F(TlsGateway, APipelinedRequestHeldInsideTheTlsStreamIsServed) {
  start();
  auto c = handshaken();
  const int fd = c->tcp().socket().native_handle();
  int on = 1;
  ASSERT_EQ(::setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on), 0);
  ASSERT_FALSE(c->write(chat(false)));
  ASSERT_FALSE(c->write(chat(false)));
  int off = 0;
  ASSERT_EQ(::setsockopt(fd, IPPROTO_TCP, TCP_CORK, &off, sizeof off), 0);
  EXPECT_EQ(c->read().result_int(), 200);
  EXPECT_EQ(c->read().result_int(), 200) << c->last_error.message();
}

TEST_F(TlsGateway, PlainHttpOnTheTlsPortGetsNoHttpAnswer) {
  start();
  auto plain = client();
  const std::string request = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_FALSE(
      plain->run([&](auto done) { net::async_write(plain->tcp(), net::buffer(request), done); }));
  const std::string answer = plain->read_raw_to_end();
  EXPECT_EQ(answer.find("HTTP/"), std::string::npos) << answer;
  EXPECT_NE(plain->last_error, beast::error::timeout) << "the server closes the connection";
  EXPECT_EQ(runtime_->stats().requests, 0u);
  EXPECT_EQ(handshaken()->exchange(chat(false, false)).result_int(), 200) << "still serving";
}

TEST_F(TlsGateway, AClientThatNeverHandshakesIsClosedAtTheDeadline) {
  GatewayOptions o;
  o.header_timeout = std::chrono::milliseconds(200);
  start(o);
  auto silent = client();
  EXPECT_EQ(silent->read_raw_to_end(), "");
  EXPECT_EQ(silent->last_error, net::error::eof) << silent->last_error.message();
}

TEST_F(TlsGateway, AnUnfinishedRequestGets408) {
  GatewayOptions o;
  o.header_timeout = std::chrono::milliseconds(200);
  start(o);
  auto c = handshaken();
  ASSERT_FALSE(c->send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"));
  const Response r = c->read();
  EXPECT_EQ(r.result_int(), 408) << c->last_error.message();
  EXPECT_FALSE(r.keep_alive());
}

TEST_F(TlsGateway, AnIdleKeptAliveConnectionIsClosedWithACloseNotify) {
  GatewayOptions o;
  o.idle_timeout = std::chrono::milliseconds(100);
  start(o);
  auto c = handshaken();
  EXPECT_EQ(c->exchange(chat(false)).result_int(), 200);
  EXPECT_EQ(c->read_to_end(), net::error::eof);
}

TEST_F(TlsGateway, ConnectionsOverTheCapGet503AfterTheHandshake) {
  GatewayOptions o;
  o.max_connections = 1;
  start(o);
  auto held = handshaken();
  auto refused = handshaken();
  const Response r = refused->read();
  EXPECT_EQ(r.result_int(), 503) << refused->last_error.message();
  EXPECT_EQ(r[http::field::retry_after], "1");
  EXPECT_FALSE(r.keep_alive());
  EXPECT_EQ(held->exchange(chat(false)).result_int(), 200);
  EXPECT_EQ(runtime_->stats().requests, 1u) << "only the held connection's call reached dynrt";
}

// A client that goes away mid-call has the call cancelled, whether it says so first (a
// close_notify, which the server's socket shows as bytes to read, then its FIN) or just closes.
// The calls are not streamed, so that no failed write can be what notices.
TEST_F(TlsGateway, AClientThatGoesAwayHasItsCallCancelled) {
  start({}, 1000);
  for (const bool close_notify : {true, false}) {
    const std::uint64_t before = engine_->counters().cancelled;
    auto c = handshaken();
    ASSERT_FALSE(c->write(chat(false, true, 4000)));
    ASSERT_TRUE(eventually([&] { return engine_->load().slots_busy > 0; }));
    if (close_notify)
      c->shutdown(std::chrono::milliseconds(200));  // the server does not answer mid-call
    else
      c->tcp().close();
    EXPECT_TRUE(eventually([&] { return engine_->counters().cancelled > before; }))
        << (close_notify ? "after a close_notify" : "after a bare close");
  }
}

// Stopped as `dynrt serve` stops: the gateway (calls in flight cancelled, I/O threads joined),
// then the runtime; with both gone, so are their TLS connections.
TEST_F(TlsGateway, StopEndsCallsInFlightAndTheirConnections) {
  start({}, 1000);
  auto c = handshaken();
  ASSERT_FALSE(c->write(chat(false, true, 4000)));
  ASSERT_TRUE(eventually([&] { return engine_->load().slots_busy > 0; }));
  gateway_->stop(std::chrono::milliseconds(0));
  runtime_->shutdown();
  gateway_.reset();
  EXPECT_TRUE(eventually([&] { return engine_->load().slots_busy == 0; }));
  EXPECT_NE(c->read_to_end(), beast::error::timeout);
}

TEST_F(TlsGateway, ABadCertificateOrKeyIsRefusedWithTheFileAtFault) {
  KeyPtr other = make_key();
  write_key(dir_ / "other.pem", other.get());
  write_key(dir_ / "locked.pem", make_key().get(), "secret");
  write_cert(dir_ / "expired.pem", make_cert(other.get(), "old", -1).get());
  std::ofstream(dir_ / "garbage.pem") << "not a certificate\n";
  std::ofstream(dir_ / "torn.pem") << "-----BEGIN PRIVATE KEY-----\nMIG";
  struct Case {
    fs::path cert, key;
    std::string says;
    fs::path at_fault;  // named in the message
  };
  const Case cases[] = {
      {dir_ / "missing.pem", key_, "cannot read the TLS certificate", dir_ / "missing.pem"},
      {cert_, dir_ / "missing.pem", "cannot read the TLS key", dir_ / "missing.pem"},
      {dir_ / "garbage.pem", key_, "holds no PEM certificate", dir_ / "garbage.pem"},
      {cert_, dir_ / "garbage.pem", "holds no PEM private key", dir_ / "garbage.pem"},
      {cert_, dir_ / "locked.pem", "is encrypted", dir_ / "locked.pem"},
      {cert_, dir_ / "other.pem", "does not match the certificate", dir_ / "other.pem"},
      {key_, cert_, "the other way round", key_},
      {cert_, dir_ / "torn.pem", "is not a usable private key", dir_ / "torn.pem"},
      {dir_ / "expired.pem", dir_ / "other.pem", "has expired", dir_ / "expired.pem"},
      {cert_, "", "needs both", ""},
  };
  RuntimeConfig cfg;
  cfg.engines.push_back({"sim", std::make_shared<engines::sim::SimEngine>(), {}});
  auto rt = Runtime::create(cfg);
  ASSERT_TRUE(rt.ok());
  for (const auto& c : cases) {
    GatewayOptions o;
    o.tls_cert = c.cert.string();
    o.tls_key = c.key.string();
    const auto g = Gateway::create(**rt, o);
    if (g.ok()) {
      ADD_FAILURE() << "accepted " << c.cert << " " << c.key;
      continue;
    }
    const std::string& message = g.error().message;
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
    EXPECT_NE(message.find(c.at_fault.string()), std::string::npos) << message;
  }
  (*rt)->shutdown();
}

TEST_F(TlsGateway, OnlyTls12AndLaterAreSpoken) {
  start();
  auto old = client();
  SSL_CTX_set_security_level(old->context().native_handle(), 0);
  SSL_set_security_level(old->ssl(), 0);
  SSL_set_min_proto_version(old->ssl(), TLS1_VERSION);
  SSL_set_max_proto_version(old->ssl(), TLS1_1_VERSION);
  EXPECT_TRUE(old->handshake());
  EXPECT_EQ(runtime_->stats().requests, 0u);
}

TEST_F(TlsGateway, AReloadServesTheRenewedCertificateToNewConnections) {
  start();
  auto before = handshaken();
  KeyPtr key = make_key();
  const fs::path renewed = dir_ / "renewed.pem";
  write_cert(renewed, make_cert(key.get(), "renewed", 30).get());
  fs::copy_file(renewed, cert_, fs::copy_options::overwrite_existing);
  write_key(key_, key.get());
  const auto reloaded = gateway_->reload_tls();
  ASSERT_TRUE(reloaded.ok()) << reloaded.error().message;
  EXPECT_NE(reloaded->find("CN=renewed"), std::string::npos) << *reloaded;

  TlsClient after(gateway_->port(), {renewed});
  ASSERT_FALSE(after.handshake());
  EXPECT_EQ(subject_of(after.ssl()), "renewed");
  EXPECT_EQ(after.exchange(chat(false)).result_int(), 200);
  EXPECT_EQ(before->exchange(chat(false)).result_int(), 200) << "open connections keep theirs";

  // A key caught half-written: refused, and the renewed certificate stays in force.
  std::ofstream(key_) << "-----BEGIN PRIVATE KEY-----\nMIG";
  EXPECT_FALSE(gateway_->reload_tls().ok());
  TlsClient later(gateway_->port(), {renewed});
  ASSERT_FALSE(later.handshake());
  EXPECT_EQ(subject_of(later.ssl()), "renewed");
}

}  // namespace
}  // namespace dynrt::gateway
