// Tokens from flags, files and the environment; TLS between the daemon's
// server and its clients with certificates made by openssl for the test: a
// verified connection works, plaintext and unverified ones do not, and with
// mutual TLS a client without a certificate is turned away.
#include "tuner/wire/credentials.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "evotune/daemon_source.h"
#include "evotune/v1/evotune.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/daemon/synthetic_tuner.h"
#include "tuner/daemon/grpc_service.h"
#include "tuner/daemon/server.h"

namespace evotune {
namespace {

namespace fs = std::filesystem;

class CredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("credentials_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    fs::remove_all(dir_);
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  // A CA (`name`.ca.pem/.key) and a certificate it signs for localhost
  // (`name`.pem/.key). False if openssl failed.
  bool MakeCertificates(const std::string& name) {
    const std::string d = dir_.string() + "/" + name;
    const std::string script = absl::StrCat(
        "set -e; cd '", dir_.string(), "'; exec >/dev/null 2>&1;",
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=", name,
        "-ca -keyout '", d, ".ca.key' -out '", d, ".ca.pem';",
        "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout '", d,
        ".key' -out '", d, ".csr';",
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > '", d,
        ".ext';", "openssl x509 -req -in '", d, ".csr' -CA '", d,
        ".ca.pem' -CAkey '", d, ".ca.key' -CAcreateserial -days 2 -extfile '",
        d, ".ext' -out '", d, ".pem'");
    return std::system(("bash -c \"" + script + "\"").c_str()) == 0;
  }

  // The Tuner service on 127.0.0.1 with `tls`.
  void Serve(const ServerTls& tls) {
    tuning_ = std::make_unique<SyntheticTuner>(dir_);
    tuner_ = std::make_unique<GrpcTuner>(&tuning_->service, AccessTokens{});
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
        ServerCredentials(tls);
    ASSERT_TRUE(credentials.ok()) << credentials.status();
    absl::StatusOr<BuiltServer> built =
        BuildServer("127.0.0.1:0", {tuner_.get()}, *credentials, true);
    ASSERT_TRUE(built.ok()) << built.status();
    server_ = std::move(built->server);
    port_ = built->port;
    loopback_port_ = built->loopback_port;
  }

  // ListTemplates through a channel to `port` with `tls`.
  grpc::StatusCode ListTemplates(const ClientTls& tls, int port) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        DaemonChannel(absl::StrCat("127.0.0.1:", port), tls);
    EXPECT_TRUE(channel.ok()) << channel.status();
    auto stub = v1::Tuner::NewStub(*channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    v1::ListTemplatesResponse resp;
    return stub->ListTemplates(&ctx, v1::ListTemplatesRequest(), &resp)
        .error_code();
  }

  fs::path dir_;
  std::unique_ptr<SyntheticTuner> tuning_;
  std::unique_ptr<GrpcTuner> tuner_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0, loopback_port_ = 0;
};

TEST_F(CredentialsTest, TokensComeFromTheFlagAFileOrTheEnvironment) {
  EXPECT_EQ(*ResolveToken("t1", "--token", "", "--token_file", "NO_SUCH_VAR"),
            "t1");
  const std::string file = Write("token", "  t2\n");
  EXPECT_EQ(*ResolveToken("", "--token", file, "--token_file", "NO_SUCH_VAR"),
            "t2");
  setenv("EVOTUNE_TEST_TOKEN", "t3", 1);
  EXPECT_EQ(
      *ResolveToken("", "--token", "", "--token_file", "EVOTUNE_TEST_TOKEN"),
      "t3");
  unsetenv("EVOTUNE_TEST_TOKEN");
  EXPECT_EQ(*ResolveToken("", "--token", "", "--token_file", "NO_SUCH_VAR"),
            "");

  for (const absl::Status& s :
       {ResolveToken("t1", "--token", file, "--token_file", "X").status(),
        ResolveToken("", "--token", (dir_ / "missing").string(), "--token_file",
                     "X")
            .status(),
        ResolveToken("", "--token", Write("blank", " \n"), "--token_file", "X")
            .status()}) {
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_NE(s.message().find("--token_file"), std::string::npos) << s;
  }
}

TEST_F(CredentialsTest, BadTlsFilesAreRefusedNamingTheFlag) {
  const std::string pem = Write("x.pem", "-----BEGIN CERTIFICATE-----\n");
  const std::string text = Write("x.txt", "not pem");
  struct Case {
    absl::Status status;
    const char* flag;
  };
  const Case cases[] = {
      {ServerCredentials({pem, "", ""}).status(), "--tls_key"},
      {ServerCredentials({"", pem, ""}).status(), "--tls_cert"},
      {ServerCredentials({"", "", pem}).status(), "--tls_cert"},
      {ServerCredentials({text, pem, ""}).status(), "--tls_cert"},
      {ServerCredentials({pem, "/no/such", ""}).status(), "--tls_key"},
      {ServerCredentials({pem, pem, text}).status(), "--tls_client_ca"},
      {ChannelCredentials({"", "", pem}).status(), "--tls_cert"},
      {ChannelCredentials({"", pem, pem}).status(), "--tls_ca"},
      {ChannelCredentials({pem, pem, ""}).status(), "--tls_key"},
      {ChannelCredentials({"/no/such", "", ""}).status(), "--tls_ca"},
      {ChannelCredentials({"", "", "", "localhost"}).status(), "--tls_ca"},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(absl::IsInvalidArgument(c.status)) << c.status;
    EXPECT_NE(c.status.message().find(c.flag), std::string::npos)
        << c.status << " should name " << c.flag;
  }
  EXPECT_TRUE(ServerCredentials({}).ok());
  EXPECT_TRUE(ChannelCredentials({}).ok());
}

TEST_F(CredentialsTest, TlsServesVerifiedClientsOnly) {
  ASSERT_TRUE(MakeCertificates("daemon"));
  ASSERT_TRUE(MakeCertificates("other"));
  const std::string d = dir_.string();
  Serve({d + "/daemon.pem", d + "/daemon.key", ""});
  EXPECT_EQ(ListTemplates({d + "/daemon.ca.pem", "", ""}, port_), grpc::OK);
  // Plaintext to the TLS port, and TLS that trusts another CA, fail.
  EXPECT_EQ(ListTemplates({}, port_), grpc::UNAVAILABLE);
  EXPECT_EQ(ListTemplates({d + "/other.ca.pem", "", ""}, port_),
            grpc::UNAVAILABLE);
  // The certificate names localhost and 127.0.0.1: a server name it does not
  // carry is refused, one it carries is accepted though 127.0.0.1 is dialled.
  EXPECT_EQ(ListTemplates({d + "/daemon.ca.pem", "", "", "localhost"}, port_),
            grpc::OK);
  EXPECT_EQ(
      ListTemplates({d + "/daemon.ca.pem", "", "", "other.example"}, port_),
      grpc::UNAVAILABLE);
  // The daemon's own workers reach it in plaintext on loopback.
  ASSERT_NE(loopback_port_, 0);
  EXPECT_EQ(ListTemplates({}, loopback_port_), grpc::OK);
}

// The C++ runtime's daemon source speaks TLS: its calls reach the service
// (which here serves no kernels) only with the daemon's CA.
TEST_F(CredentialsTest, TheRuntimeReachesATlsDaemon) {
  ASSERT_TRUE(MakeCertificates("daemon"));
  ASSERT_TRUE(MakeCertificates("other"));
  const std::string d = dir_.string();
  Serve({d + "/daemon.pem", d + "/daemon.key", ""});
  const std::string address = absl::StrCat("127.0.0.1:", port_);
  auto find = [&](const DaemonTls& tls) {
    absl::StatusOr<std::unique_ptr<DaemonSource>> source =
        DaemonSource::Connect(address, "", tls);
    EXPECT_TRUE(source.ok()) << source.status();
    return (*source)->Find(Problem{}, "", "sm_90a").status();
  };
  absl::Status served = find({d + "/daemon.ca.pem", "", ""});
  EXPECT_TRUE(absl::IsUnimplemented(served)) << served;
  EXPECT_NE(served.message().find("this daemon serves no kernels"),
            std::string::npos)
      << served;
  EXPECT_TRUE(absl::IsUnavailable(find({}))) << find({});
  EXPECT_TRUE(absl::IsUnavailable(find({d + "/other.ca.pem", "", ""})));
  absl::Status missing =
      DaemonSource::Connect(address, "", {d + "/none.pem", "", ""}).status();
  EXPECT_TRUE(absl::IsInvalidArgument(missing)) << missing;
  EXPECT_NE(missing.message().find("--tls_ca"), std::string::npos) << missing;
}

TEST_F(CredentialsTest, MutualTlsTurnsAwayClientsWithoutACertificate) {
  ASSERT_TRUE(MakeCertificates("daemon"));
  ASSERT_TRUE(MakeCertificates("client"));
  ASSERT_TRUE(MakeCertificates("stranger"));
  const std::string d = dir_.string();
  Serve({d + "/daemon.pem", d + "/daemon.key", d + "/client.ca.pem"});
  const std::string ca = d + "/daemon.ca.pem";
  EXPECT_EQ(ListTemplates({ca, d + "/client.pem", d + "/client.key"}, port_),
            grpc::OK);
  EXPECT_EQ(ListTemplates({ca, "", ""}, port_), grpc::UNAVAILABLE);
  EXPECT_EQ(
      ListTemplates({ca, d + "/stranger.pem", d + "/stranger.key"}, port_),
      grpc::UNAVAILABLE);
}

}  // namespace
}  // namespace evotune
