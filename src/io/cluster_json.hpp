// SPDX-License-Identifier: Apache-2.0
// The cluster's JSON form, private to src/io: one reader and one writer,
// used for cluster files (cluster_io.cpp) and for the cluster a plan file
// embeds (plan_io.cpp), so that the two can never drift apart.
#pragma once

#include "io/json_util.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/io/json_io.hpp"

namespace recsearch::io::detail {

// Reads a cluster object (format "recsearch.cluster", version 1). Error
// paths are relative to `obj` ("/levels/0/size"); a caller reading an
// embedded cluster prefixes them. `cost` receives the "cost" object when
// not null (it is checked either way). Keys the format does not define are
// handled as `unknown` says.
[[nodiscard]] Cluster read_cluster(const Reader& r, const Json& obj, CostParams* cost,
                                   const UnknownKeys& unknown = {});

// The cluster as a JSON object: format, version, name, levels, device.
[[nodiscard]] OrderedJson cluster_json(const Cluster& c);

}  // namespace recsearch::io::detail
