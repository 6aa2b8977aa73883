// Job specs for the coordinator's tests.
#ifndef FULCRUM_SERVER_COORDINATOR_TESTING_TEST_SPECS_H_
#define FULCRUM_SERVER_COORDINATOR_TESTING_TEST_SPECS_H_

#include <string>

#include "fulcrum/v1/coordinator.pb.h"
#include "fulcrum/v1/job.pb.h"

namespace fulcrum::testing {

// A 4 -> 2 MLP job for min..max workers on `shards` shards.
inline v1::JobSpec TinySpec(int min, int max, int shards) {
  v1::JobSpec spec;
  spec.set_name("j");
  spec.mutable_model()->set_type("mlp");
  spec.mutable_model()->add_layers(4);
  spec.mutable_model()->add_layers(2);
  spec.mutable_dataset()->set_dir("/d");
  spec.mutable_optimizer()->set_lr(0.1);
  spec.mutable_workers()->set_min(min);
  spec.mutable_workers()->set_max(max);
  spec.set_shards(shards);
  return spec;
}

// A worker's registration (a hostname is required).
inline v1::RegisterWorkerRequest WorkerOn(const std::string& host = "host-1") {
  v1::RegisterWorkerRequest r;
  r.set_hostname(host);
  return r;
}

}  // namespace fulcrum::testing

#endif  // FULCRUM_SERVER_COORDINATOR_TESTING_TEST_SPECS_H_
