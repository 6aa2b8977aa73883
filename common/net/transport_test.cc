#include "common/net/transport.h"

#include <fstream>

#include "common/net/api_token.h"
#include "common/testing/process.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

std::string Data(const std::string& name) {
  return testing::Runfile("tests/testdata/tls/cluster/" + name);
}

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = testing::TestTempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

class TransportTest : public ::testing::Test {
 protected:
  void TearDown() override { SetProcessTransport(Transport()); }
};

TEST_F(TransportTest, LoadsPemFilesAndSaysWhichFlagIsWrong) {
  absl::StatusOr<Transport> t =
      LoadTransport({Data("tls.crt"), Data("tls.key"), Data("ca.crt")});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->tls());
  EXPECT_TRUE(t->mutual());
  EXPECT_FALSE(LoadTransport({}).value().tls());

  auto message = [](const TlsFiles& f) {
    absl::StatusOr<Transport> r = LoadTransport(f);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  EXPECT_NE(message({Data("tls.crt"), "", ""}).find("--tls_key"),
            std::string::npos);
  EXPECT_NE(message({"", Data("tls.key"), ""}).find("--tls_cert"),
            std::string::npos);
  EXPECT_NE(message({"/nonexistent.crt", Data("tls.key"), ""})
                .find("--tls_cert: cannot read /nonexistent.crt"),
            std::string::npos);
  const std::string junk = Write("junk.pem", "not a certificate\n");
  EXPECT_NE(message({"", "", junk}).find("--tls_ca"), std::string::npos);
  EXPECT_NE(message({"", "", junk}).find("not a PEM file"), std::string::npos);
}

TEST_F(TransportTest, PlaintextServesOnLoopbackOnlyUnlessInsecure) {
  for (const char* ok : {"127.0.0.1:7070", "127.0.0.1:0", "127.8.9.1:1",
                         "localhost:7070", "[::1]:7070"}) {
    EXPECT_TRUE(CheckServing(ok, false).ok()) << ok;
  }
  for (const char* remote : {"0.0.0.0:7070", "10.0.0.5:7100", "[::]:7070",
                             "fulcrum-server-0:7100", "128.0.0.1:1"}) {
    const absl::Status s = CheckServing(remote, false);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << remote;
    EXPECT_NE(s.message().find("--insecure"), std::string::npos) << s;
    EXPECT_NE(s.message().find("--tls_cert"), std::string::npos) << s;
    EXPECT_TRUE(CheckServing(remote, true).ok()) << remote;
  }
  EXPECT_EQ(DescribeTransport(false), "insecure: plaintext, loopback only");
  EXPECT_EQ(DescribeTransport(true), "insecure: plaintext (--insecure)");
}

TEST_F(TransportTest, TlsServesAnywhereButNeedsACertificate) {
  ASSERT_TRUE(UseTransport({Data("tls.crt"), Data("tls.key"), Data("ca.crt")})
                  .ok());
  EXPECT_TRUE(CheckServing("0.0.0.0:7070", false).ok());
  EXPECT_EQ(DescribeTransport(false), "mutual TLS");
  // A CA alone makes a TLS client, which cannot serve.
  ASSERT_TRUE(UseTransport({"", "", Data("ca.crt")}).ok());
  const absl::Status s = CheckServing("127.0.0.1:7070", false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--tls_cert"), std::string::npos) << s;
  ASSERT_TRUE(UseTransport({Data("tls.crt"), Data("tls.key"), ""}).ok());
  EXPECT_EQ(DescribeTransport(false), "TLS (no client certificates)");
}

TEST(ApiTokenTest, ReadsTheTokenFileAndRejectsBadOnes) {
  absl::StatusOr<std::string> t =
      ReadTokenFile(Write("token", "  s3cret-Token_1\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "s3cret-Token_1");
  for (const std::string& bad :
       {Write("empty", "\n"), Write("spaced", "two words\n"),
        std::string("/nonexistent/token")}) {
    absl::StatusOr<std::string> r = ReadTokenFile(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("--token_file"), std::string::npos);
  }
}

}  // namespace
}  // namespace fulcrum
