// fulcrumctl: submit and manage Fulcrum jobs over the coordinator API.
//
//   fulcrumctl [--coordinator host:port] submit JOB.yaml [--watch]
//   fulcrumctl list
//   fulcrumctl status JOB [--watch] [--json]
//   fulcrumctl cancel JOB
//   fulcrumctl members
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/export.h"
#include "client/format.h"
#include "common/config/job_spec.h"
#include "common/net/api_token.h"
#include "common/net/grpc_options.h"
#include "common/net/transport.h"
#include "common/status/grpc_status.h"
#include "fulcrum/v1/coordinator.grpc.pb.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "coordinator host:port");
ABSL_FLAG(bool, watch, false,
          "status/submit: redraw live progress until the job ends");
ABSL_FLAG(bool, json, false, "status/list: print machine-readable JSON");
ABSL_FLAG(int64_t, timeout_ms, 10000, "deadline of each RPC");
ABSL_FLAG(std::string, out, "", "export: the model file to write");
ABSL_FLAG(double, interval_s, 0.5, "--watch refresh period");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate this process presents (mutual TLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM authority the servers' certificates must chain to (TLS)");
ABSL_FLAG(std::string, token_file, "",
          "file holding the coordinator's API token (its --token_file)");

namespace fulcrum {
namespace {

constexpr char kUsage[] =
    "fulcrumctl [--coordinator host:port] COMMAND\n"
    "  submit JOB.yaml [--watch]   submit a job (YAML or JSON); prints its id\n"
    "  list [--json]               all jobs\n"
    "  status JOB [--watch] [--json]\n"
    "  cancel JOB\n"
    "  export JOB --out FILE       write the job's parameters (and its "
    "embedding tables' rows to FILE.tables) (after it "
    "ended)\n"
    "  members                     registered workers and shards\n"
    "Secured clusters: --tls_ca (and --tls_cert/--tls_key for mutual TLS), "
    "--token_file.";

class Ctl {
 public:
  explicit Ctl(std::string token)
      : stub_(v1::Coordinator::NewStub(
            MakeChannel(absl::GetFlag(FLAGS_coordinator)))),
        token_(std::move(token)) {}

  template <typename Req, typename Resp, typename Method>
  bool Call(Method method, const Req& request, Resp* response) {
    grpc::ClientContext context;
    SetTimeout(&context,
               std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms)));
    AttachToken(&context, token_);
    grpc::Status s = (stub_.get()->*method)(&context, request, response);
    if (!s.ok()) {
      std::cerr << "fulcrumctl: " << StatusCodeName(s.error_code()) << ": "
                << s.error_message() << "\n";
    }
    return s.ok();
  }

  int Submit(const std::string& path) {
    std::ifstream in(path);
    if (!in) {
      std::cerr << "fulcrumctl: cannot read " << path << "\n";
      return 2;
    }
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text.str());
    absl::Status valid = spec.ok() ? ValidateJobSpec(*spec) : spec.status();
    if (!valid.ok()) {
      std::cerr << "fulcrumctl: " << path << ": " << valid.message() << "\n";
      return 2;
    }
    v1::SubmitJobRequest request;
    *request.mutable_spec() = *spec;
    v1::SubmitJobResponse response;
    if (!Call(&v1::Coordinator::Stub::SubmitJob, request, &response)) return 1;
    std::cout << response.job_id() << std::endl;
    return absl::GetFlag(FLAGS_watch) ? Status(response.job_id()) : 0;
  }

  int List() {
    // Page by page (the coordinator answers at most 1000 jobs a call).
    v1::ListJobsResponse response;
    v1::ListJobsRequest request;
    request.set_page_size(500);
    do {
      v1::ListJobsResponse page;
      if (!Call(&v1::Coordinator::Stub::ListJobs, request, &page)) return 1;
      for (v1::JobStatus& j : *page.mutable_jobs())
        *response.add_jobs() = std::move(j);
      request.set_page_token(page.next_page_token());
    } while (!request.page_token().empty());
    if (absl::GetFlag(FLAGS_json)) {
      std::cout << ToJson(response) << "\n";
      return 0;
    }
    std::cout << absl::StrFormat("%-10s %-20s %-10s %8s %10s %s\n", "JOB",
                                 "NAME", "STATE", "STEP", "ACCURACY",
                                 "MESSAGE");
    for (const v1::JobStatus& j : response.jobs()) {
      std::cout << absl::StrFormat(
          "%-10s %-20s %-10s %8d %10s %s\n", j.job_id(), j.spec().name(),
          v1::JobState_Name(j.state()), j.progress().step(),
          j.progress().evaluated_step() > 0
              ? absl::StrFormat("%.4f", j.progress().test_accuracy())
              : "-",
          j.message());
    }
    return 0;
  }

  int Status(const std::string& job_id) {
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    const bool watch = absl::GetFlag(FLAGS_watch),
               json = absl::GetFlag(FLAGS_json);
    const bool tty = isatty(STDOUT_FILENO);
    for (;;) {
      v1::JobStatus status;
      if (!Call(&v1::Coordinator::Stub::GetJob, request, &status)) return 1;
      const bool ended = status.state() == v1::SUCCEEDED ||
                         status.state() == v1::FAILED ||
                         status.state() == v1::CANCELLED;
      if (json) {
        if (!watch || ended) std::cout << ToJson(status) << "\n";
      } else if (watch && tty) {
        std::cout << "\r\033[K" << ProgressLine(status) << std::flush;
      } else {
        std::cout << ProgressLine(status) << std::endl;
      }
      if (!watch || ended) {
        if (!json && watch && tty) std::cout << "\n";
        if (!json && ended) std::cout << FinalLines(status);
        if (!json && !watch) {
          std::cout << "membership:\n" << EventLines(status);
          if (status.epochs_size() > 0)
            std::cout << "data:\n" << DataLines(status);
        }
        return status.state() == v1::SUCCEEDED || !watch ? 0 : 1;
      }
      absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_interval_s)));
    }
  }

  int Cancel(const std::string& job_id) {
    v1::CancelJobRequest request;
    request.set_job_id(job_id);
    v1::JobStatus status;
    if (!Call(&v1::Coordinator::Stub::CancelJob, request, &status)) return 1;
    std::cout << job_id << " " << v1::JobState_Name(status.state()) << "\n";
    return 0;
  }

  int Export(const std::string& job_id) {
    const std::string out = absl::GetFlag(FLAGS_out);
    if (out.empty()) {
      std::cerr << "fulcrumctl: export needs --out FILE\n";
      return 2;
    }
    std::vector<ExportedTable> tables;
    absl::StatusOr<ModelFile> model = PullModel(job_id, &tables);
    absl::Status written =
        model.ok() ? WriteModelFile(out, *model) : model.status();
    // The embedding tables' rows beside it (FILE.tables).
    if (written.ok() && !tables.empty())
      written = WriteTableFile(out + ".tables", tables);
    if (!written.ok()) {
      std::cerr << "fulcrumctl: " << absl::StatusCodeToString(written.code())
                << ": " << written.message() << "\n";
      return 1;
    }
    std::cout << "wrote " << model->params.size() << " parameters (version "
              << model->version << ") to " << out << "\n";
    for (const ExportedTable& t : tables) {
      std::cout << "wrote table " << t.name << ": " << t.ids.size()
                << " rows of dim " << t.dim << " to " << out << ".tables\n";
    }
    return 0;
  }

  // The job's parameters through the coordinator's ExportJob.
  absl::StatusOr<ModelFile> PullModel(const std::string& job_id,
                                      std::vector<ExportedTable>* tables) {
    grpc::ClientContext context;
    SetTimeout(&context,
               std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms)));
    AttachToken(&context, token_);
    v1::ExportJobRequest request;
    request.set_job_id(job_id);
    auto reader = stub_->ExportJob(&context, request);
    ModelAssembler model;
    v1::ExportChunk chunk;
    absl::Status added;
    while (added.ok() && reader->Read(&chunk)) added = model.Add(chunk);
    if (!added.ok()) {
      context.TryCancel();
      reader->Finish().IgnoreError();
      return added;
    }
    absl::Status s = FromGrpcStatus(reader->Finish());
    if (!s.ok()) return s;
    *tables = model.tables();
    return model.Finish();
  }

  int Members() {
    v1::ListMembersResponse response;
    if (!Call(&v1::Coordinator::Stub::ListMembers, v1::ListMembersRequest(),
              &response))
      return 1;
    std::cout << absl::StrFormat("%-8s %-7s %-22s %-8s %s\n", "ID", "ROLE",
                                 "ADDRESS", "JOB", "HEARTBEAT");
    for (const v1::Member& m : response.members()) {
      std::cout << absl::StrFormat(
          "%-8s %-7s %-22s %-8s %.1fs ago\n", m.id(), m.role(), m.address(),
          m.job_id().empty() ? "-" : m.job_id(), m.last_heartbeat_age_s());
    }
    return 0;
  }

 private:
  static std::string ToJson(const google::protobuf::Message& m) {
    std::string out;
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    options.preserve_proto_field_names = true;
    options.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(m, &out, options);
    return out;
  }

  std::unique_ptr<v1::Coordinator::Stub> stub_;
  const std::string token_;
};

}  // namespace
}  // namespace fulcrum

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(fulcrum::kUsage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::cerr << fulcrum::kUsage << "\n";
    return 2;
  }
  const std::string command = args[1];
  if (absl::Status transport = fulcrum::UseTransport(
          {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
           absl::GetFlag(FLAGS_tls_ca)});
      !transport.ok()) {
    std::cerr << "fulcrumctl: " << transport.message() << "\n";
    return 2;
  }
  std::string token;
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    absl::StatusOr<std::string> t =
        fulcrum::ReadTokenFile(absl::GetFlag(FLAGS_token_file));
    if (!t.ok()) {
      std::cerr << "fulcrumctl: " << t.status().message() << "\n";
      return 2;
    }
    token = *std::move(t);
  }
  fulcrum::Ctl ctl(token);
  auto need = [&](size_t n) {
    if (args.size() == n + 2) return true;
    std::cerr << "fulcrumctl: " << command << " takes " << n << " argument(s)\n"
              << fulcrum::kUsage << "\n";
    return false;
  };
  if (command == "submit") return need(1) ? ctl.Submit(args[2]) : 2;
  if (command == "list") return need(0) ? ctl.List() : 2;
  if (command == "status") return need(1) ? ctl.Status(args[2]) : 2;
  if (command == "cancel") return need(1) ? ctl.Cancel(args[2]) : 2;
  if (command == "members") return need(0) ? ctl.Members() : 2;
  if (command == "export") return need(1) ? ctl.Export(args[2]) : 2;
  std::cerr << "fulcrumctl: unknown command '" << command << "'\n"
            << fulcrum::kUsage << "\n";
  return 2;
}
