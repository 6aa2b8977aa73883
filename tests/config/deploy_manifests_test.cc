// deploy/ against the binaries it runs: the Kubernetes manifests (deploy/k8s)
// and the container image (deploy/containers/Containerfile) must not drift
// from the code. Every flag a manifest passes is one the binary accepts
// (asked from the binary itself); pods are scraped and probed on the port
// their metrics endpoint listens on, with the labels Prometheus keeps
// (deploy/prometheus/prometheus-k8s.yml); Services select pods and name
// ports that exist; servers advertise an address their headless Service
// resolves; the job ConfigMap is a valid job whose directories are the
// image's and the volumes'; the image installs a package for every shared
// library the binaries load.
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/config/job_spec.h"
#include "common/testing/process.h"
#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace fulcrum {
namespace {

using testing::ReadFile;
using testing::Runfile;

const char* const kBase = "deploy/k8s/base/";

std::vector<YAML::Node> LoadDocs(const std::string& path) {
  const std::string text = ReadFile(Runfile(path));
  EXPECT_FALSE(text.empty()) << path;
  std::vector<YAML::Node> docs;
  for (const YAML::Node& d : YAML::LoadAll(text)) {
    if (d.IsMap()) docs.push_back(d);
  }
  return docs;
}

// Every object of the base kustomization, in its resources' order.
std::vector<YAML::Node> BaseObjects() {
  const YAML::Node k = YAML::Load(ReadFile(Runfile(std::string(kBase) +
                                                   "kustomization.yaml")));
  std::vector<YAML::Node> all;
  for (const YAML::Node& r : k["resources"]) {
    for (YAML::Node d : LoadDocs(kBase + r.as<std::string>())) {
      all.push_back(d);
    }
  }
  return all;
}

std::vector<YAML::Node> OfKind(const std::vector<YAML::Node>& objects,
                               const std::string& kind) {
  std::vector<YAML::Node> out;
  for (const YAML::Node& o : objects) {
    if (o["kind"].as<std::string>() == kind) out.push_back(o);
  }
  return out;
}

// The flags a binary accepts, from its own --helpfull.
std::set<std::string> FlagsOf(const std::string& binary) {
  static const std::map<std::string, std::string> kPath = {
      {"fulcrum-coordinator", "server/coordinator/fulcrum-coordinator"},
      {"fulcrum-server", "server/ps/fulcrum-server"},
      {"fulcrum-worker", "worker/fulcrum-worker"},
      {"fulcrumctl", "client/fulcrumctl"}};
  auto it = kPath.find(binary);
  if (it == kPath.end()) return {};
  const testing::RunResult r =
      testing::RunCommand({Runfile(it->second), "--helpfull"}, absl::Seconds(30));
  std::set<std::string> flags;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    absl::string_view l = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&l, "--")) continue;
    flags.insert(std::string(l.substr(0, l.find_first_of(" ="))));
  }
  return flags;
}

// --name=value of a container command; "" when absent.
std::string Flag(const YAML::Node& container, const std::string& name) {
  for (const YAML::Node& a : container["command"]) {
    absl::string_view arg = a.Scalar();
    if (absl::ConsumePrefix(&arg, "--" + name + "=")) return std::string(arg);
  }
  return "";
}

int Port(const std::string& host_port) {
  int port = -1;
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(host_port.substr(colon + 1), &port)) {
    return -1;
  }
  return port;
}

int ContainerPort(const YAML::Node& container, const std::string& name) {
  for (const YAML::Node& p : container["ports"]) {
    if (p["name"].as<std::string>() == name) return p["containerPort"].as<int>();
  }
  return -1;
}

struct Workload {
  std::string name;
  YAML::Node object, pod, container;
};

std::vector<Workload> Workloads(const std::vector<YAML::Node>& objects) {
  std::vector<Workload> out;
  for (const YAML::Node& o : objects) {
    const std::string kind = o["kind"].as<std::string>();
    if (kind != "Deployment" && kind != "StatefulSet") continue;
    const YAML::Node pod = o["spec"]["template"];
    EXPECT_EQ(pod["spec"]["containers"].size(), 1u);
    out.push_back({o["metadata"]["name"].as<std::string>(), o, pod,
                   pod["spec"]["containers"][0]});
  }
  return out;
}

TEST(DeployManifestsTest, EveryFlagIsOneTheBinaryAccepts) {
  const std::vector<Workload> workloads = Workloads(BaseObjects());
  ASSERT_EQ(workloads.size(), 3u) << "coordinator, servers, workers";
  std::vector<YAML::Node> containers;
  for (const Workload& w : workloads) containers.push_back(w.container);
  // The GPU overlay's patch replaces the worker's command.
  for (const YAML::Node& patch : LoadDocs("deploy/k8s/gpu/workers-gpu.yaml")) {
    containers.push_back(patch["spec"]["template"]["spec"]["containers"][0]);
  }
  for (const YAML::Node& c : containers) {
    ASSERT_TRUE(c["command"].IsSequence()) << c["name"];
    const std::string binary = c["command"][0].as<std::string>();
    const std::set<std::string> known = FlagsOf(binary);
    ASSERT_GT(known.size(), 5u) << binary << " is not one of the binaries";
    for (size_t i = 1; i < c["command"].size(); ++i) {
      absl::string_view arg = c["command"][i].Scalar();
      ASSERT_TRUE(absl::ConsumePrefix(&arg, "--")) << binary << " " << arg;
      const std::string name(arg.substr(0, arg.find('=')));
      EXPECT_TRUE(known.count(name)) << binary << " has no flag --" << name;
    }
  }
}

TEST(DeployManifestsTest, PodsAreScrapedAndProbedOnTheirMetricsPort) {
  for (const Workload& w : Workloads(BaseObjects())) {
    SCOPED_TRACE(w.name);
    const YAML::Node labels = w.pod["metadata"]["labels"];
    const YAML::Node notes = w.pod["metadata"]["annotations"];
    // prometheus-k8s.yml keeps part-of=fulcrum pods and maps component to
    // the role label the alerts and dashboard use.
    EXPECT_EQ(labels["app.kubernetes.io/part-of"].as<std::string>(), "fulcrum");
    const std::string role = labels["app.kubernetes.io/component"].as<std::string>();
    EXPECT_TRUE(role == "coordinator" || role == "server" || role == "worker")
        << role;
    // The selector picks the template's pods.
    for (const auto& kv : w.object["spec"]["selector"]["matchLabels"]) {
      EXPECT_EQ(labels[kv.first.Scalar()].Scalar(), kv.second.Scalar());
    }
    EXPECT_EQ(notes["prometheus.io/scrape"].as<std::string>(), "true");
    const std::string port = Flag(w.container, "metrics_port");
    EXPECT_EQ(Flag(w.container, "metrics_address"), "0.0.0.0")
        << "the endpoint must listen beyond the pod's loopback";
    EXPECT_EQ(notes["prometheus.io/port"].as<std::string>(), port);
    EXPECT_EQ(std::to_string(ContainerPort(w.container, "metrics")), port);
    const YAML::Node ready = w.container["readinessProbe"]["httpGet"];
    const YAML::Node live = w.container["livenessProbe"]["httpGet"];
    EXPECT_EQ(ready["path"].as<std::string>(), "/readyz");
    EXPECT_EQ(live["path"].as<std::string>(), "/healthz");
    EXPECT_EQ(ready["port"].as<std::string>(), "metrics");
    EXPECT_EQ(live["port"].as<std::string>(), "metrics");
    // Runs as the image's non-root user.
    EXPECT_EQ(w.pod["spec"]["securityContext"]["runAsUser"].as<int>(), 10001);
  }
}

TEST(DeployManifestsTest, ServicesReachThePortsTheProcessesListenOn) {
  const std::vector<YAML::Node> objects = BaseObjects();
  const std::vector<Workload> workloads = Workloads(objects);
  std::map<std::string, YAML::Node> services;
  for (const YAML::Node& s : OfKind(objects, "Service")) {
    services[s["metadata"]["name"].as<std::string>()] = s;
    // Some workload's pods carry the selector, and name the target ports.
    const Workload* target = nullptr;
    for (const Workload& w : workloads) {
      bool all = true;
      for (const auto& kv : s["spec"]["selector"]) {
        all = all && w.pod["metadata"]["labels"][kv.first.Scalar()].Scalar() ==
                         kv.second.Scalar();
      }
      if (all) target = &w;
    }
    ASSERT_NE(target, nullptr) << s["metadata"]["name"] << " selects no pods";
    for (const YAML::Node& p : s["spec"]["ports"]) {
      const std::string name = p["targetPort"].as<std::string>();
      const int port = ContainerPort(target->container, name);
      EXPECT_EQ(port, p["port"].as<int>())
          << s["metadata"]["name"] << " port " << name;
    }
  }
  std::map<std::string, Workload> by_name;
  for (const Workload& w : workloads) by_name[w.name] = w;
  ASSERT_TRUE(by_name.count("fulcrum-coordinator") &&
              by_name.count("fulcrum-server") && by_name.count("fulcrum-worker"));

  // The coordinator serves on its grpc port; the others dial its Service.
  const Workload& coordinator = by_name["fulcrum-coordinator"];
  const int grpc = ContainerPort(coordinator.container, "grpc");
  EXPECT_EQ(Port(Flag(coordinator.container, "listen")), grpc);
  ASSERT_TRUE(services.count("fulcrum-coordinator"));
  const std::string coordinator_address =
      "fulcrum-coordinator:" + std::to_string(grpc);
  for (const char* name : {"fulcrum-server", "fulcrum-worker"}) {
    EXPECT_EQ(Flag(by_name[name].container, "coordinator"), coordinator_address)
        << name;
  }
  // Servers advertise <pod>.<headless service>:<listen port>.
  const Workload& server = by_name["fulcrum-server"];
  const std::string service = server.object["spec"]["serviceName"].as<std::string>();
  ASSERT_TRUE(services.count(service));
  EXPECT_EQ(services[service]["spec"]["clusterIP"].as<std::string>(), "None");
  const int data = ContainerPort(server.container, "grpc");
  EXPECT_EQ(Port(Flag(server.container, "listen")), data);
  // Two labels after the pod name: a certificate's wildcard
  // (*.fulcrum-server.NAMESPACE.svc) cannot cover fewer.
  EXPECT_EQ(Flag(server.container, "advertise"),
            "$(POD_NAME)." + service + ".$(POD_NAMESPACE).svc:" +
                std::to_string(data));
  std::map<std::string, std::string> env;
  for (const YAML::Node& e : server.container["env"]) {
    env[e["name"].as<std::string>()] =
        e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>();
  }
  EXPECT_EQ(env["POD_NAME"], "metadata.name");
  EXPECT_EQ(env["POD_NAMESPACE"], "metadata.namespace");
  // The coordinator keeps its state on its volume.
  bool state = false;
  for (const YAML::Node& m : coordinator.container["volumeMounts"]) {
    state = state || m["mountPath"].as<std::string>() ==
                         Flag(coordinator.container, "state_dir");
  }
  EXPECT_TRUE(state) << "--state_dir is not a mounted volume";
}

// The directory a pod mounts `path` from, and whether that volume is a
// Secret: "" when no mount holds it.
std::string SecretMountOf(const Workload& w, const std::string& path) {
  for (const YAML::Node& m : w.container["volumeMounts"]) {
    const std::string dir = m["mountPath"].as<std::string>();
    if (!absl::StartsWith(path, dir + "/")) continue;
    for (const YAML::Node& v : w.pod["spec"]["volumes"]) {
      if (v["name"].Scalar() == m["name"].Scalar() && v["secret"]) {
        return v["secret"]["secretName"].as<std::string>();
      }
    }
  }
  return "";
}

TEST(DeployManifestsTest, EveryProcessSpeaksMutualTlsFromASecret) {
  for (const Workload& w : Workloads(BaseObjects())) {
    SCOPED_TRACE(w.name);
    for (const char* flag : {"tls_cert", "tls_key", "tls_ca"}) {
      const std::string path = Flag(w.container, flag);
      ASSERT_FALSE(path.empty()) << "--" << flag << " missing";
      EXPECT_EQ(SecretMountOf(w, path), "fulcrum-tls") << path;
    }
    EXPECT_EQ(Flag(w.container, "insecure"), "");
    for (const YAML::Node& a : w.container["command"]) {
      EXPECT_NE(a.Scalar(), "--insecure");
    }
    // The secret's files (mode 0440) are readable by the pod's group.
    EXPECT_EQ(w.pod["spec"]["securityContext"]["fsGroup"].as<int>(), 10001);
    if (w.name == "fulcrum-coordinator") {
      EXPECT_EQ(SecretMountOf(w, Flag(w.container, "token_file")),
                "fulcrum-api-token");
    }
  }
  for (const YAML::Node& patch : LoadDocs("deploy/k8s/gpu/workers-gpu.yaml")) {
    const YAML::Node c = patch["spec"]["template"]["spec"]["containers"][0];
    EXPECT_EQ(Flag(c, "tls_ca"), "/etc/fulcrum/tls/ca.crt");
    EXPECT_EQ(Flag(c, "tls_cert"), "/etc/fulcrum/tls/tls.crt");
    EXPECT_EQ(Flag(c, "tls_key"), "/etc/fulcrum/tls/tls.key");
  }
}

// Whether `selector` (matchLabels) picks a pod with `labels`.
bool Selects(const YAML::Node& selector, const YAML::Node& labels) {
  for (const auto& kv : selector["matchLabels"]) {
    if (labels[kv.first.Scalar()].Scalar() != kv.second.Scalar()) return false;
  }
  return true;
}

TEST(DeployManifestsTest, OnlyFulcrumPodsReachGrpcAndAnyoneTheMetrics) {
  const std::vector<YAML::Node> objects = BaseObjects();
  const std::vector<YAML::Node> policies = OfKind(objects, "NetworkPolicy");
  ASSERT_EQ(policies.size(), 1u);
  const YAML::Node policy = policies[0]["spec"];
  EXPECT_EQ(policy["policyTypes"][0].as<std::string>(), "Ingress");
  for (const Workload& w : Workloads(objects)) {
    SCOPED_TRACE(w.name);
    const YAML::Node labels = w.pod["metadata"]["labels"];
    ASSERT_TRUE(Selects(policy["podSelector"], labels)) << "not covered";
    // Every port the container serves is allowed: gRPC from Fulcrum's own
    // pods (each of which the rule's selector picks), metrics from anyone.
    for (const YAML::Node& p : w.container["ports"]) {
      const int port = p["containerPort"].as<int>();
      const bool metrics = p["name"].as<std::string>() == "metrics";
      bool allowed = false;
      for (const YAML::Node& rule : policy["ingress"]) {
        bool has_port = false;
        for (const YAML::Node& rp : rule["ports"])
          has_port = has_port || rp["port"].as<int>() == port;
        if (!has_port) continue;
        if (!rule["from"]) {
          allowed = true;  // anyone
          EXPECT_TRUE(metrics) << "gRPC port " << port << " open to anyone";
          continue;
        }
        for (const YAML::Node& from : rule["from"]) {
          bool all = true;
          for (const Workload& peer : Workloads(objects))
            all = all && Selects(from["podSelector"], peer.pod["metadata"]["labels"]);
          allowed = allowed || all;
        }
      }
      EXPECT_TRUE(allowed) << "port " << port << " is not reachable";
    }
  }
  const std::vector<YAML::Node> budgets = OfKind(objects, "PodDisruptionBudget");
  ASSERT_EQ(budgets.size(), 1u);
  EXPECT_EQ(budgets[0]["spec"]["maxUnavailable"].as<int>(), 1);
  std::map<std::string, Workload> by_name;
  for (const Workload& w : Workloads(objects)) by_name[w.name] = w;
  EXPECT_TRUE(Selects(budgets[0]["spec"]["selector"],
                      by_name["fulcrum-server"].pod["metadata"]["labels"]));
  EXPECT_FALSE(Selects(budgets[0]["spec"]["selector"],
                       by_name["fulcrum-worker"].pod["metadata"]["labels"]));
}

TEST(DeployManifestsTest, TheJobConfigMapIsAValidJobForThisDeployment) {
  const std::vector<YAML::Node> objects = BaseObjects();
  const std::vector<YAML::Node> maps = OfKind(objects, "ConfigMap");
  ASSERT_EQ(maps.size(), 1u);
  std::map<std::string, Workload> by_name;
  for (const Workload& w : Workloads(objects)) by_name[w.name] = w;
  const Workload& server = by_name["fulcrum-server"];
  const std::string containerfile =
      ReadFile(Runfile("deploy/containers/Containerfile"));
  ASSERT_FALSE(maps[0]["data"].size() == 0);
  int jobs = 0;
  for (const auto& kv : maps[0]["data"]) {
    SCOPED_TRACE(kv.first.Scalar());
    if (kv.first.Scalar() == "fulcrumctl.flags") {
      // fulcrumctl's flag file: flags it accepts, files the pod mounts.
      const std::set<std::string> known = FlagsOf("fulcrumctl");
      for (absl::string_view line :
           absl::StrSplit(kv.second.Scalar(), '\n', absl::SkipWhitespace())) {
        ASSERT_TRUE(absl::ConsumePrefix(&line, "--")) << line;
        const size_t eq = line.find('=');
        const std::string name(line.substr(0, eq));
        EXPECT_TRUE(known.count(name)) << "fulcrumctl has no flag --" << name;
        const std::string value(line.substr(eq + 1));
        if (name == "coordinator") {
          EXPECT_EQ(value, Flag(by_name["fulcrum-worker"].container,
                                "coordinator"));
        } else if (absl::EndsWith(name, "_file") ||
                   absl::StartsWith(name, "tls_")) {
          EXPECT_NE(SecretMountOf(by_name["fulcrum-coordinator"], value), "")
              << value << " is not in a secret the coordinator pod mounts";
        }
      }
      continue;
    }
    ++jobs;
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(kv.second.Scalar());
    ASSERT_TRUE(spec.ok()) << spec.status();
    ApplyDefaults(&*spec);
    EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
    // The data is where the image's dataset package puts it.
    EXPECT_EQ(spec->dataset().dir(), "/usr/share/datasets/fashion-mnist");
    EXPECT_TRUE(absl::StrContains(containerfile, "dataset-fashion-mnist"));
    // Checkpoints go to the servers' volume.
    if (spec->checkpoint().every_steps() > 0) {
      bool mounted = false;
      for (const YAML::Node& m : server.container["volumeMounts"]) {
        mounted = mounted ||
                  m["mountPath"].as<std::string>() == spec->checkpoint().dir();
      }
      EXPECT_TRUE(mounted) << spec->checkpoint().dir()
                           << " is not a server volume";
    }
    EXPECT_LE(spec->shards(), server.object["spec"]["replicas"].as<int>());
    EXPECT_LE(spec->workers().min(),
              by_name["fulcrum-worker"].object["spec"]["replicas"].as<int>());
  }
  EXPECT_GE(jobs, 1);
  // The coordinator pod mounts the ConfigMap (for fulcrumctl submit there).
  bool mounted = false;
  for (const YAML::Node& v : by_name["fulcrum-coordinator"].pod["spec"]["volumes"]) {
    mounted = mounted || (v["configMap"] && v["configMap"]["name"].Scalar() ==
                                                maps[0]["metadata"]["name"].Scalar());
  }
  EXPECT_TRUE(mounted);
}

TEST(DeployManifestsTest, TheGpuOverlayGivesEachWorkerAGpu) {
  const YAML::Node k =
      YAML::Load(ReadFile(Runfile("deploy/k8s/gpu/kustomization.yaml")));
  EXPECT_EQ(k["resources"][0].as<std::string>(), "../base");
  const std::vector<YAML::Node> patch =
      LoadDocs("deploy/k8s/gpu/workers-gpu.yaml");
  ASSERT_EQ(patch.size(), 1u);
  EXPECT_EQ(patch[0]["metadata"]["name"].as<std::string>(), "fulcrum-worker");
  const YAML::Node c = patch[0]["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(c["name"].as<std::string>(), "worker");  // merges by name
  EXPECT_EQ(Flag(c, "device"), "cuda:0");
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 1);
  EXPECT_EQ(c["image"].as<std::string>(), "fulcrum-gpu");
  EXPECT_EQ(k["images"][0]["name"].as<std::string>(), "fulcrum-gpu");
  const std::string containerfile =
      ReadFile(Runfile("deploy/containers/Containerfile"));
  EXPECT_TRUE(absl::StrContains(containerfile, "AS gpu"));
}

// The overlay for PyTorch workers: a Deployment of the torch image running
// the example worker with flags it has, scraped and probed like every
// Fulcrum pod, and the job it trains in the coordinator's ConfigMap.
TEST(DeployManifestsTest, TheTorchOverlayRunsPyTorchWorkers) {
  const YAML::Node k =
      YAML::Load(ReadFile(Runfile("deploy/k8s/torch/kustomization.yaml")));
  EXPECT_EQ(k["resources"][0].as<std::string>(), "../base");
  EXPECT_EQ(k["images"][0]["name"].as<std::string>(), "fulcrum-torch");
  const std::vector<Workload> workloads = Workloads(LoadDocs(
      "deploy/k8s/torch/" + k["resources"][1].as<std::string>()));
  ASSERT_EQ(workloads.size(), 1u);
  const Workload& w = workloads[0];
  EXPECT_EQ(w.object["kind"].as<std::string>(), "Deployment");
  EXPECT_EQ(w.container["image"].as<std::string>(), "fulcrum-torch");
  const YAML::Node labels = w.pod["metadata"]["labels"];
  EXPECT_EQ(labels["app.kubernetes.io/part-of"].as<std::string>(), "fulcrum");
  EXPECT_EQ(labels["app.kubernetes.io/component"].as<std::string>(), "worker");
  for (const auto& kv : w.object["spec"]["selector"]["matchLabels"]) {
    EXPECT_EQ(labels[kv.first.Scalar()].Scalar(), kv.second.Scalar());
  }
  // Every flag is one the script parses (its argparse options).
  const YAML::Node command = w.container["command"];
  ASSERT_EQ(command[0].as<std::string>(), "python3");
  const std::string script = command[1].as<std::string>();
  ASSERT_TRUE(absl::EndsWith(script, "/fulcrum_train.py")) << script;
  const std::string source =
      ReadFile(Runfile("examples/torch/fulcrum_train.py"));
  for (size_t i = 2; i < command.size(); ++i) {
    absl::string_view arg = command[i].Scalar();
    ASSERT_TRUE(absl::ConsumePrefix(&arg, "--")) << arg;
    const std::string name(arg.substr(0, arg.find('=')));
    EXPECT_TRUE(absl::StrContains(source, "\"--" + name + "\""))
        << "fulcrum_train.py has no option --" << name;
  }
  // Scraped and probed on its metrics port; mutual TLS from the secret.
  const std::string port = Flag(w.container, "metrics_port");
  EXPECT_EQ(Flag(w.container, "metrics_address"), "0.0.0.0");
  EXPECT_EQ(w.pod["metadata"]["annotations"]["prometheus.io/port"].as<std::string>(),
            port);
  EXPECT_EQ(std::to_string(ContainerPort(w.container, "metrics")), port);
  EXPECT_EQ(w.container["readinessProbe"]["httpGet"]["path"].as<std::string>(),
            "/readyz");
  EXPECT_EQ(w.container["livenessProbe"]["httpGet"]["path"].as<std::string>(),
            "/healthz");
  EXPECT_EQ(w.pod["spec"]["securityContext"]["runAsUser"].as<int>(), 10001);
  EXPECT_NE(SecretMountOf(w, Flag(w.container, "tls_dir") + "/tls.crt"), "");
  // The job it trains: a valid spec of an external model, added to the
  // ConfigMap the coordinator mounts.
  const YAML::Node generator = k["configMapGenerator"][0];
  EXPECT_EQ(generator["name"].as<std::string>(), "fulcrum-jobs");
  EXPECT_EQ(generator["behavior"].as<std::string>(), "merge");
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(ReadFile(Runfile(
      "deploy/k8s/torch/" + generator["files"][0].as<std::string>())));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ApplyDefaults(&*spec);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_EQ(spec->model().type(), "external");
  // The image stage exists and brings PyTorch.
  const std::string containerfile =
      ReadFile(Runfile("deploy/containers/Containerfile"));
  EXPECT_TRUE(absl::StrContains(containerfile, "AS torch"));
  EXPECT_TRUE(absl::StrContains(containerfile, "python3-torch"));
  EXPECT_TRUE(absl::StrContains(containerfile, "/opt/fulcrum/examples/"));
}

// Debian packages (with everything they depend on) that provide `libs`.
std::set<std::string> Closure(std::vector<std::string> packages) {
  std::set<std::string> seen;
  while (!packages.empty()) {
    const std::string p = packages.back();
    packages.pop_back();
    if (!seen.insert(p).second) continue;
    const testing::RunResult r = testing::RunCommand(
        {"/usr/bin/dpkg-query", "-W", "-f=${Depends},${Pre-Depends}", p},
        absl::Seconds(30));
    for (absl::string_view alt : absl::StrSplit(r.out, absl::ByAnyChar(",|"),
                                                absl::SkipWhitespace())) {
      alt = absl::StripAsciiWhitespace(alt);
      std::string name(alt.substr(0, alt.find_first_of(" (:")));
      if (!name.empty()) packages.push_back(name);
    }
  }
  return seen;
}

TEST(DeployManifestsTest, TheImageInstallsEveryLibraryTheBinariesLoad) {
  // The packages the Containerfile installs, plus what any Debian base with
  // apt has (apt needs them).
  const std::string containerfile =
      ReadFile(Runfile("deploy/containers/Containerfile"));
  const size_t from = containerfile.find("--no-install-recommends");
  ASSERT_NE(from, std::string::npos);
  const size_t to = containerfile.find("&&", from);
  std::vector<std::string> listed = {"libc6", "libgcc-s1", "libstdc++6"};
  for (absl::string_view w :
       absl::StrSplit(containerfile.substr(from, to - from),
                      absl::ByAnyChar(" \\\n"), absl::SkipWhitespace())) {
    if (!absl::StartsWith(w, "--")) listed.emplace_back(w);
  }
  ASSERT_GT(listed.size(), 5u);
  const std::set<std::string> installed = Closure(listed);
  // Every library the binaries load, with the paths dpkg may know it by
  // (Debian's merged /usr: as loaded, resolved, resolved without /usr).
  std::map<std::string, std::vector<std::string>> libs;  // path -> binaries
  for (const char* binary :
       {"server/coordinator/fulcrum-coordinator", "server/ps/fulcrum-server",
        "worker/fulcrum-worker", "client/fulcrumctl"}) {
    const testing::RunResult ldd = testing::RunCommand(
        {"/usr/bin/ldd", Runfile(binary)}, absl::Seconds(30));
    ASSERT_EQ(ldd.exit_code, 0) << binary;
    int n = 0;
    for (absl::string_view line : absl::StrSplit(ldd.out, '\n')) {
      const size_t arrow = line.find("=> /");
      if (arrow == absl::string_view::npos) continue;
      std::string path(line.substr(arrow + 3));
      libs[path.substr(0, path.find(' '))].push_back(binary);
      ++n;
    }
    EXPECT_GT(n, 5) << binary;
  }
  std::vector<std::string> query = {"/usr/bin/dpkg", "-S"};
  std::map<std::string, std::vector<std::string>> names;  // path -> candidates
  for (const auto& [path, binaries] : libs) {
    std::error_code error;
    const std::string real = std::filesystem::canonical(path, error).string();
    std::vector<std::string>& c = names[path];
    c.push_back(path);
    if (!error) {
      c.push_back(real);
      if (absl::StartsWith(real, "/usr/")) c.push_back(real.substr(4));
    }
    query.insert(query.end(), c.begin(), c.end());
  }
  // One query ("package[, package]: path" per known path; exit 1 when some
  // candidate is unknown, which is expected).
  const testing::RunResult owners =
      testing::RunCommand(query, absl::Seconds(120));
  std::map<std::string, std::string> owner;  // path -> first package
  for (absl::string_view line : absl::StrSplit(owners.out, '\n')) {
    const size_t colon = line.find(": /");
    if (colon == absl::string_view::npos) continue;
    absl::string_view package = line.substr(0, colon);
    package = package.substr(0, package.find_first_of(",:"));
    owner[std::string(line.substr(colon + 2))] = std::string(package);
  }
  for (const auto& [path, binaries] : libs) {
    std::string package;
    for (const std::string& c : names[path]) {
      if (package.empty() && owner.count(c)) package = owner[c];
    }
    ASSERT_FALSE(package.empty()) << path << " belongs to no package";
    EXPECT_TRUE(installed.count(package))
        << binaries[0] << " loads " << path << " from " << package
        << ", which the Containerfile does not install";
  }
}

}  // namespace
}  // namespace fulcrum
