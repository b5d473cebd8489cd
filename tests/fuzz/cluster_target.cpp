// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the cluster reader. Any bytes read as a cluster file either
// give a cluster whose cut schedule multiplies out to its device count and
// which round-trips through cluster_to_json, or a well-formed
// recsearch::Error (fuzz_common.hpp).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "recsearch/recsearch.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace recsearch;
  fuzz::guard(fuzz::kSource, false, [&] {
    CostParams cost;
    const Cluster c = io::parse_cluster(fuzz::as_text(data, size), fuzz::kSource, &cost);

    std::int64_t product = 1;
    for (const Cut& cut : c.cuts()) {
      if (cut.size < 2) fuzz::die("a cut of size < 2");
      product *= cut.size;
    }
    if (product != c.num_devices()) fuzz::die("the cuts do not multiply out to the devices");

    const std::string text = io::cluster_to_json(c);
    try {
      const Cluster again = io::parse_cluster(text, "roundtrip.json");
      if (io::cluster_to_json(again) != text) fuzz::die("cluster_to_json does not round-trip");
    } catch (const Error& e) {
      fuzz::die(std::string("the reader rejects what the writer wrote: ") + e.what());
    }
  });
  return 0;
}
