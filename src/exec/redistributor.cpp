// SPDX-License-Identifier: Apache-2.0
// The Redistributor (exec/redistributor.hpp): each step of a
// redistribution plan as one collective on the step's mesh-axis group, with
// the packing around it. A block is viewed as [outer, n, inner] around the
// dim a step splits or joins; piece i of a split is rows [i·n/k, (i+1)·n/k).
#include "recsearch/exec/redistributor.hpp"

#include <algorithm>

#include "recsearch/error.hpp"

namespace recsearch::exec {
namespace {

struct View {
  std::int64_t outer = 1, n = 1, inner = 1;
};

View view(const ir::Shape& s, int dim) {
  View v;
  const auto d = static_cast<std::size_t>(dim);
  for (std::size_t i = 0; i < d; ++i) v.outer *= s[i];
  v.n = s.at(d);
  for (std::size_t i = d + 1; i < s.size(); ++i) v.inner *= s[i];
  return v;
}

// k pieces along the view's n, one after another (piece i contiguous).
std::vector<float> split_pieces(const std::vector<float>& x, const View& v, std::int64_t k) {
  std::vector<float> out(x.size());
  const std::int64_t part = v.n / k;
  const std::int64_t piece = v.outer * part * v.inner;
  for (std::int64_t i = 0; i < k; ++i) {
    for (std::int64_t o = 0; o < v.outer; ++o) {
      const auto src = x.begin() + (o * v.n + i * part) * v.inner;
      std::copy(src, src + part * v.inner, out.begin() + i * piece + o * part * v.inner);
    }
  }
  return out;
}

// Inverse of split_pieces: k pieces of [outer, part, inner] joined along n = k·part.
std::vector<float> join_pieces(const std::vector<float>& x, const View& piece_view,
                               std::int64_t k) {
  std::vector<float> out(x.size());
  const std::int64_t part = piece_view.n;
  const std::int64_t n = part * k;
  const std::int64_t piece = piece_view.outer * part * piece_view.inner;
  for (std::int64_t i = 0; i < k; ++i) {
    for (std::int64_t o = 0; o < piece_view.outer; ++o) {
      const auto src = x.begin() + i * piece + o * part * piece_view.inner;
      std::copy(src, src + part * piece_view.inner,
                out.begin() + (o * n + i * part) * piece_view.inner);
    }
  }
  return out;
}

}  // namespace

Redistributor::Redistributor(Communicator& comm)
    : comm_(comm), coords_(rank_coords(comm.rank(), comm.mesh())) {}

LocalTensor Redistributor::scatter_partial(const LocalTensor& t, const Layout& to) {
  const std::vector<std::uint32_t> axes = zero_scatter_axes(t.layout, to);
  if (axes.empty()) throw Error(Errc::kInternal, "scatter_partial: not a reduce-scatter");
  const auto& mesh = comm_.mesh();
  LocalTensor cur = t;
  for (const std::uint32_t a : axes) {
    const std::int64_t k = mesh[a];
    const ir::Shape shape = local_shape(cur.full, cur.layout, mesh);
    const std::vector<float> send = split_pieces(cur.data, view(shape, to[a].dim), k);
    std::vector<float> next(send.size() / static_cast<std::size_t>(k));
    comm_.reduce_scatter(a, send.data(), next.data(), next.size());
    cur.layout[a] = to[a];
    cur.data = std::move(next);
  }
  return cur;
}

LocalTensor Redistributor::redistribute(const LocalTensor& t, const Layout& to) {
  const auto& mesh = comm_.mesh();
  LocalTensor cur = t;
  for (const RedistStep& st : redistribution_plan(t.layout, to, t.full, mesh)) {
    const std::int64_t k = mesh[st.axis];
    const ir::Shape shape = local_shape(cur.full, cur.layout, mesh);
    std::vector<float> next;
    switch (st.kind) {
      case StepKind::AllGather: {
        next.resize(cur.data.size() * static_cast<std::size_t>(k));
        comm_.all_gather(st.axis, cur.data.data(), next.data(), cur.data.size());
        next = join_pieces(next, view(shape, st.dim), k);
        cur.layout[st.axis] = cost::AxisLayout::replicate();
        break;
      }
      case StepKind::AllToAll: {
        const std::vector<float> send = split_pieces(cur.data, view(shape, st.to_dim), k);
        std::vector<float> recv(send.size());
        comm_.all_to_all(st.axis, send.data(), recv.data(),
                         send.size() / static_cast<std::size_t>(k));
        ir::Shape piece = shape;
        piece[static_cast<std::size_t>(st.to_dim)] /= k;
        next = join_pieces(recv, view(piece, st.dim), k);
        cur.layout[st.axis] = cost::AxisLayout::shard(st.to_dim);
        break;
      }
      case StepKind::AllReduce: {
        next = std::move(cur.data);
        comm_.all_reduce(st.axis, next.data(), next.size());
        cur.layout[st.axis] = cost::AxisLayout::replicate();
        break;
      }
      case StepKind::ReduceScatter: {
        const std::vector<float> send = split_pieces(cur.data, view(shape, st.to_dim), k);
        next.resize(send.size() / static_cast<std::size_t>(k));
        comm_.reduce_scatter(st.axis, send.data(), next.data(), next.size());
        cur.layout[st.axis] = cost::AxisLayout::shard(st.to_dim);
        break;
      }
      case StepKind::Slice: {
        const View v = view(shape, st.to_dim);
        const std::int64_t part = v.n / k;
        const std::int64_t i = coords_[st.axis];
        next.resize(cur.data.size() / static_cast<std::size_t>(k));
        for (std::int64_t o = 0; o < v.outer; ++o) {
          const auto src = cur.data.begin() + (o * v.n + i * part) * v.inner;
          std::copy(src, src + part * v.inner, next.begin() + o * part * v.inner);
        }
        cur.layout[st.axis] = cost::AxisLayout::shard(st.to_dim);
        break;
      }
    }
    cur.data = std::move(next);
  }
  if (cur.layout != to) throw Error(Errc::kInternal, "redistribution did not reach its layout");
  return cur;
}

void Redistributor::reduce_partial(LocalTensor& t) {
  Layout whole = t.layout;
  for (auto& x : whole) {
    if (x.kind == cost::LayoutKind::Partial) x = cost::AxisLayout::replicate();
  }
  if (whole != t.layout) t = redistribute(t, whole);
}

}  // namespace recsearch::exec
