// SPDX-License-Identifier: Apache-2.0
// Contractions: MatMul / BatchMatMul, Einsum (and Custom ops carrying an
// `einsum` attribute) and Attention. These are the operators where a
// reduction loop exists, so where cutting can leave outputs partial.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "algebra/space_builder.hpp"

namespace recsearch::algebra::detail {

namespace {

double loops_product(const std::vector<std::int64_t>& sizes) { return product_d(sizes); }

}  // namespace

// ---- MatMul / BatchMatMul --------------------------------------------------
//
// numpy matmul semantics: a [..., i, k] x b [..., k, j]; a 1-D operand has no
// i (or j); leading dims broadcast. transpose_a/b swap the last two dims of a
// matrix operand and are ignored for 1-D operands, as in ONNX importers that
// fold Transpose into MatMul.
namespace {

// Where a matmul's i, k and j sit in its operands, and their broadcast batch.
struct MatmulDims {
  bool has_i = false;
  bool has_j = false;
  std::size_t a_i = 0, a_k = 0, b_k = 0, b_j = 0;
  std::span<const std::int64_t> a_batch, b_batch;
  ir::Shape batch;
};

// The dims of a matmul's operands; kShape when k differs or the batch dims
// do not broadcast.
MatmulDims matmul_dims(const SpaceBuilder& b) {
  const bool ta = b.attr_bool("transpose_a", false);
  const bool tb = b.attr_bool("transpose_b", false);
  const ir::Shape& a = b.in(0);
  const ir::Shape& w = b.in(1);
  for (std::size_t j = 0; j < 2; ++j) {
    if (b.in(j).empty()) {
      b.fail_shape(b.in_path(j), std::string(j == 0 ? "a " : "b ") + b.describe_in(j) +
                                     " is a scalar; matrix products need rank >= 1");
    }
  }
  const std::size_t ra = a.size();
  const std::size_t rb = w.size();
  MatmulDims m;
  m.has_i = ra >= 2;
  m.has_j = rb >= 2;
  // Dim positions of i and k in a, of k and j in b.
  m.a_i = m.has_i ? (ta ? ra - 1 : ra - 2) : 0;
  m.a_k = ra == 1 ? 0 : (ta ? ra - 2 : ra - 1);
  m.b_k = rb == 1 ? 0 : (tb ? rb - 1 : rb - 2);
  m.b_j = m.has_j ? (tb ? rb - 2 : rb - 1) : 0;
  if (a[m.a_k] != w[m.b_k]) {
    b.fail_shape(b.in_path(1),
                 "inner dims differ: a " + b.describe_in(0) + " has k=" + std::to_string(a[m.a_k]) +
                     (ta ? " (transposed)" : "") + ", b " + b.describe_in(1) +
                     " has k=" + std::to_string(w[m.b_k]) + (tb ? " (transposed)" : ""));
  }
  m.a_batch = std::span<const std::int64_t>(a.data(), m.has_i ? ra - 2 : 0);
  m.b_batch = std::span<const std::int64_t>(w.data(), m.has_j ? rb - 2 : 0);
  std::size_t bad_a = 0;
  std::size_t bad_b = 0;
  const auto batch = broadcast(m.a_batch, m.b_batch, &bad_a, &bad_b);
  if (!batch) {
    b.fail_shape(b.in_path(1), "batch dims do not broadcast: a " + b.describe_in(0) + " dim " +
                                   std::to_string(bad_a) + " is " + std::to_string(a[bad_a]) +
                                   ", b " + b.describe_in(1) + " dim " + std::to_string(bad_b) +
                                   " is " + std::to_string(w[bad_b]));
  }
  m.batch = *batch;
  return m;
}

// The loops of a matmul (batch, i, k, j), its operand mappings and flops.
void add_matmul_loops(SpaceBuilder& b, const MatmulDims& m) {
  const ir::Shape& a = b.in(0);
  const ir::Shape& w = b.in(1);
  const std::size_t nb = m.batch.size();
  std::vector<std::int64_t> sizes;
  for (std::size_t q = 0; q < nb; ++q) {
    b.add_loop(indexed("b", q), m.batch[q], DimRole::Parallel);
    sizes.push_back(m.batch[q]);
  }
  const int li = m.has_i ? b.add_loop("i", a[m.a_i], DimRole::Parallel) : kUnmapped;
  const int lk = b.add_loop("k", a[m.a_k], DimRole::Reduction);
  const int lj = m.has_j ? b.add_loop("j", w[m.b_j], DimRole::Parallel) : kUnmapped;
  if (m.has_i) sizes.push_back(a[m.a_i]);
  sizes.push_back(a[m.a_k]);
  if (m.has_j) sizes.push_back(w[m.b_j]);

  const auto map_batch = [&](std::size_t j, std::span<const std::int64_t> dims) {
    const std::size_t off = nb - dims.size();
    for (std::size_t d = 0; d < dims.size(); ++d) {
      const std::size_t q = off + d;
      // A broadcast size-1 dim holds the same data for every index of the loop.
      if (dims[d] == 1 && m.batch[q] != 1) continue;
      b.map_in(j, d, static_cast<int>(q));
    }
  };
  map_batch(0, m.a_batch);
  map_batch(1, m.b_batch);
  b.map_in(0, m.a_k, lk);
  if (m.has_i) b.map_in(0, m.a_i, li);
  b.map_in(1, m.b_k, lk);
  if (m.has_j) b.map_in(1, m.b_j, lj);
  for (std::size_t q = 0; q < nb; ++q) b.map_out(0, q, static_cast<int>(q));
  if (m.has_i) b.map_out(0, nb, li);
  if (m.has_j) b.map_out(0, nb + (m.has_i ? 1 : 0), lj);
  b.set_flops(2.0 * loops_product(sizes));
}

}  // namespace

void build_matmul(SpaceBuilder& b) {
  b.expect_inputs(2, 2);
  b.expect_outputs(1, 1);
  const MatmulDims m = matmul_dims(b);
  ir::Shape out = m.batch;
  if (m.has_i) out.push_back(b.in(0)[m.a_i]);
  if (m.has_j) out.push_back(b.in(1)[m.b_j]);
  b.set_inferred(0, out);
  if (b.outputs_checked()) return;
  add_matmul_loops(b, m);
}

// ---- Einsum ----------------------------------------------------------------

namespace {

struct Term {
  std::string labels;    // letters in order, ellipsis excluded
  int ellipsis_at = -1;  // index into labels where "..." stands, -1 if none
};

struct Equation {
  std::vector<Term> inputs;
  bool explicit_output = false;
  Term output;
};

bool is_label(char c) noexcept { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

Equation parse_equation(const SpaceBuilder& b, std::string_view attr, const std::string& text) {
  const auto bad = [&](const std::string& why) {
    b.fail_attr(attr, "einsum equation '" + text + "': " + why);
  };
  std::string eq;
  for (const char c : text) {
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') eq.push_back(c);
  }
  Equation e;
  std::string lhs = eq;
  const std::size_t arrow = eq.find("->");
  if (arrow != std::string::npos) {
    if (eq.find("->", arrow + 2) != std::string::npos) bad("more than one '->'");
    lhs = eq.substr(0, arrow);
    e.explicit_output = true;
  }
  const auto parse_term = [&](std::string_view s) {
    Term t;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '.') {
        if (s.substr(i, 3) != "..." || t.ellipsis_at >= 0) bad("'.' must form a single '...'");
        t.ellipsis_at = static_cast<int>(t.labels.size());
        i += 2;
      } else if (is_label(c)) {
        t.labels.push_back(c);
      } else {
        bad(std::string("unexpected character '") + c + "'");
      }
    }
    return t;
  };
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = lhs.find(',', start);
    e.inputs.push_back(parse_term(std::string_view(lhs).substr(
        start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (e.explicit_output) {
    const std::string rhs = eq.substr(arrow + 2);
    if (rhs.find(',') != std::string::npos) bad("only one output is supported");
    e.output = parse_term(rhs);
    for (std::size_t i = 0; i < e.output.labels.size(); ++i) {
      if (e.output.labels.find(e.output.labels[i], i + 1) != std::string::npos) {
        bad(std::string("output letter '") + e.output.labels[i] + "' appears twice");
      }
    }
  }
  return e;
}

// What the operands say about the equation's letters and '...' dims.
struct Letters {
  static constexpr std::size_t kNoOwner = static_cast<std::size_t>(-1);
  std::array<std::int64_t, 128> size{};  // per letter, its extent
  std::array<std::size_t, 128> owner{};  // per letter, the first operand naming it
  std::array<int, 128> count{};          // per letter, how many times operands name it
  std::vector<std::size_t> ell_rank;     // per operand, the dims its '...' stands for
  ir::Shape ell_shape;                   // the broadcast of every operand's '...' dims
  bool any_ellipsis = false;

  Letters() { owner.fill(kNoOwner); }
};

// Checks operand j's rank against its term, and returns the dim where its
// '...' stands (its letter count when it has none).
std::size_t check_term_rank(const SpaceBuilder& b, const Term& t, std::size_t j) {
  const std::size_t rank = b.in(j).size();
  const std::size_t nl = t.labels.size();
  if (t.ellipsis_at >= 0 ? rank < nl : rank != nl) {
    b.fail_shape(b.in_path(j), "operand " + std::to_string(j) + " " + b.describe_in(j) +
                                   " has rank " + std::to_string(rank) + " but its term '" +
                                   t.labels + "'" + (t.ellipsis_at >= 0 ? " (with '...')" : "") +
                                   " names " + std::to_string(nl) + " dims");
  }
  return t.ellipsis_at >= 0 ? static_cast<std::size_t>(t.ellipsis_at) : nl;
}

// Broadcasts operand j's '...' dims (er of them from dim ep) into L.ell_shape.
void add_ellipsis(const SpaceBuilder& b, std::size_t j, std::size_t ep, std::size_t er,
                  Letters& L) {
  L.any_ellipsis = true;
  const std::span<const std::int64_t> part(b.in(j).data() + ep, er);
  std::size_t bad_part = 0;
  const auto merged = broadcast(L.ell_shape, part, nullptr, &bad_part);
  if (!merged) {
    b.fail_shape(b.in_path(j), "the '...' dims of operand " + std::to_string(j) + " " +
                                   b.describe_in(j) + " " + fmt_shape(part) +
                                   " do not broadcast with the other operands' " +
                                   fmt_shape(L.ell_shape));
  }
  L.ell_shape = *merged;
}

// Records the sizes of operand j's letters; a letter must have one size.
void add_letters(const SpaceBuilder& b, const Term& t, std::size_t j, std::size_t ep,
                 std::size_t er, Letters& L) {
  for (std::size_t l = 0; l < t.labels.size(); ++l) {
    const auto c = static_cast<unsigned char>(t.labels[l]);
    const std::size_t dim = l < ep ? l : l + er;
    const std::int64_t size = b.in(j)[dim];
    ++L.count[c];
    if (L.owner[c] == Letters::kNoOwner) {
      L.owner[c] = j;
      L.size[c] = size;
    } else if (L.size[c] != size) {
      b.fail_shape(b.in_path(j), std::string("letter '") + t.labels[l] + "' is " +
                                     std::to_string(L.size[c]) + " in operand " +
                                     std::to_string(L.owner[c]) + " " + b.describe_in(L.owner[c]) +
                                     " but " + std::to_string(size) + " in operand " +
                                     std::to_string(j) + " " + b.describe_in(j));
    }
  }
}

// Letter sizes, the ellipsis extent of each operand, and their broadcast.
Letters measure_letters(const SpaceBuilder& b, const Equation& e) {
  const std::size_t n = e.inputs.size();
  Letters L;
  L.ell_rank.assign(n, 0);
  for (std::size_t j = 0; j < n; ++j) {
    const Term& t = e.inputs[j];
    const std::size_t ep = check_term_rank(b, t, j);
    const std::size_t er = t.ellipsis_at >= 0 ? b.in(j).size() - t.labels.size() : 0;
    L.ell_rank[j] = er;
    if (t.ellipsis_at >= 0) add_ellipsis(b, j, ep, er, L);
    add_letters(b, t, j, ep, er, L);
  }
  return L;
}

// The output term: explicit, or numpy's implicit one (ellipsis first, then
// letters used exactly once, in ASCII order). Its letters must occur in an operand.
Term output_term(const SpaceBuilder& b, std::string_view attr, const std::string& text,
                 const Equation& e, const Letters& L) {
  Term out = e.output;
  if (!e.explicit_output) {
    if (L.any_ellipsis) out.ellipsis_at = 0;
    for (std::size_t c = 0; c < 128; ++c) {
      if (L.count[c] == 1) out.labels.push_back(static_cast<char>(c));
    }
  }
  for (const char c : out.labels) {
    if (L.owner[static_cast<unsigned char>(c)] == Letters::kNoOwner) {
      b.fail_attr(attr, "einsum equation '" + text + "': output letter '" + std::string(1, c) +
                            "' appears in no operand");
    }
  }
  return out;
}

ir::Shape output_shape(const Term& out, const Letters& L) {
  const bool ell_in_out = out.ellipsis_at >= 0;
  const std::size_t out_ep =
      ell_in_out ? static_cast<std::size_t>(out.ellipsis_at) : out.labels.size();
  ir::Shape out_shape;
  for (std::size_t l = 0; l <= out.labels.size(); ++l) {
    if (l == out_ep && ell_in_out) {
      out_shape.insert(out_shape.end(), L.ell_shape.begin(), L.ell_shape.end());
    }
    if (l < out.labels.size()) {
      out_shape.push_back(L.size[static_cast<unsigned char>(out.labels[l])]);
    }
  }
  return out_shape;
}

// The loops of an einsum: per letter, and the '...' dims as one block.
struct EinsumLoops {
  std::array<int, 128> letter_loop{};
  int ell_first = kUnmapped;
  std::vector<std::int64_t> sizes;
  bool any_reduction = false;

  EinsumLoops() { letter_loop.fill(kUnmapped); }
};

// Adds the loops in order of first appearance; the ellipsis dims as one block.
EinsumLoops add_einsum_loops(SpaceBuilder& b, const Equation& e, const Term& out,
                             const Letters& L) {
  EinsumLoops lp;
  const std::size_t er_all = L.ell_shape.size();
  const auto add_ellipsis_loops = [&] {
    if (lp.ell_first != kUnmapped || er_all == 0) return;
    const DimRole role = out.ellipsis_at >= 0 ? DimRole::Parallel : DimRole::Reduction;
    lp.any_reduction = lp.any_reduction || role == DimRole::Reduction;
    for (std::size_t q = 0; q < er_all; ++q) {
      const int l = b.add_loop(indexed("e", q), L.ell_shape[q], role);
      if (q == 0) lp.ell_first = l;
      lp.sizes.push_back(L.ell_shape[q]);
    }
  };
  for (const Term& t : e.inputs) {
    for (std::size_t l = 0; l <= t.labels.size(); ++l) {
      if (t.ellipsis_at >= 0 && l == static_cast<std::size_t>(t.ellipsis_at)) add_ellipsis_loops();
      if (l == t.labels.size()) break;
      const auto c = static_cast<unsigned char>(t.labels[l]);
      if (lp.letter_loop[c] != kUnmapped) continue;
      const bool kept = out.labels.find(t.labels[l]) != std::string::npos;
      lp.any_reduction = lp.any_reduction || !kept;
      lp.letter_loop[c] = b.add_loop(std::string(1, t.labels[l]), L.size[c],
                                     kept ? DimRole::Parallel : DimRole::Reduction);
      lp.sizes.push_back(L.size[c]);
    }
  }
  return lp;
}

// Calls map(dim, loop) for every dim of an operand with term t, er '...'
// dims and `shape`; a broadcast size-1 '...' dim maps to no loop.
template <class Map>
void map_term(const Term& t, std::size_t er, std::span<const std::int64_t> shape, const Letters& L,
              const EinsumLoops& lp, Map&& map) {
  const std::size_t er_all = L.ell_shape.size();
  const std::size_t ep =
      t.ellipsis_at >= 0 ? static_cast<std::size_t>(t.ellipsis_at) : t.labels.size();
  for (std::size_t l = 0; l < t.labels.size(); ++l) {
    const std::size_t dim = l < ep ? l : l + er;
    map(dim, lp.letter_loop[static_cast<unsigned char>(t.labels[l])]);
  }
  for (std::size_t q = 0; q < er; ++q) {
    const std::size_t global = er_all - er + q;
    if (shape[ep + q] == 1 && L.ell_shape[global] != 1) continue;
    map(ep + q, lp.ell_first + static_cast<int>(global));
  }
}

}  // namespace

void build_einsum(SpaceBuilder& b, std::string_view attr) {
  b.expect_outputs(1, 1);
  if (!b.has_attr(attr)) {
    b.fail_attr(attr, "missing the einsum equation '" + std::string(attr) + "'");
  }
  const std::string text = b.attr_string(attr, "");
  const Equation e = parse_equation(b, attr, text);
  const std::size_t n = b.num_inputs();
  if (n == 0 || e.inputs.size() != n) {
    b.fail(Errc::kSchema, b.path() + "/inputs",
           "einsum equation '" + text + "' has " + std::to_string(e.inputs.size()) +
               " operands but the operator has " + std::to_string(n) + " inputs");
  }
  const Letters L = measure_letters(b, e);
  const Term out = output_term(b, attr, text, e, L);
  const ir::Shape out_shape = output_shape(out, L);
  b.set_inferred(0, out_shape);
  if (b.outputs_checked()) return;

  const EinsumLoops lp = add_einsum_loops(b, e, out, L);
  for (std::size_t j = 0; j < n; ++j) {
    map_term(e.inputs[j], L.ell_rank[j], b.in(j), L, lp,
             [&](std::size_t dim, int loop) { b.map_in(j, dim, loop); });
  }
  map_term(out, out.ellipsis_at >= 0 ? L.ell_shape.size() : 0, out_shape, L, lp,
           [&](std::size_t dim, int loop) { b.map_out(0, dim, loop); });
  b.set_flops((lp.any_reduction ? 2.0 : 1.0) * loops_product(lp.sizes));
}

// ---- Attention -------------------------------------------------------------
//
// softmax(q k^T [+ mask]) v with q [b,h,s,d], k [b,h,t,d], v [b,h,t,e]. The
// kv length t and the contraction d stay whole: softmax needs a full row.
void build_attention(SpaceBuilder& b) {
  b.expect_inputs(3, 4);
  b.expect_outputs(1, 1);
  (void)b.attr_bool("causal", false);  // type-checked; it does not change the iteration space
  b.expect_in_rank(0, 4, "q");
  b.expect_in_rank(1, 4, "k");
  b.expect_in_rank(2, 4, "v");
  const ir::Shape& q = b.in(0);
  const ir::Shape& k = b.in(1);
  const ir::Shape& v = b.in(2);
  const std::int64_t nb = q[0];
  const std::int64_t nh = q[1];
  const std::int64_t ns = q[2];
  const std::int64_t nd = q[3];
  const std::int64_t nt = k[2];
  const std::int64_t ne = v[3];
  for (std::size_t j = 1; j <= 2; ++j) {
    if (b.in(j)[0] != nb || b.in(j)[1] != nh) {
      b.fail_shape(b.in_path(j), std::string(j == 1 ? "k " : "v ") + b.describe_in(j) +
                                     " has batch, heads (" + std::to_string(b.in(j)[0]) + ", " +
                                     std::to_string(b.in(j)[1]) + ") but q " + b.describe_in(0) +
                                     " has (" + std::to_string(nb) + ", " + std::to_string(nh) +
                                     ")");
    }
  }
  if (k[3] != nd) {
    b.fail_shape(b.in_path(1), "k " + b.describe_in(1) + " has head dim " + std::to_string(k[3]) +
                                   " but q " + b.describe_in(0) + " has " + std::to_string(nd));
  }
  if (v[2] != nt) {
    b.fail_shape(b.in_path(2), "v " + b.describe_in(2) + " has kv length " + std::to_string(v[2]) +
                                   " but k " + b.describe_in(1) + " has " + std::to_string(nt));
  }
  const std::array<std::int64_t, 4> scores{nb, nh, ns, nt};
  if (b.num_inputs() == 4) {
    const ir::Shape& m = b.in(3);
    bool ok = m.size() <= 4;
    for (std::size_t i = 0; ok && i < m.size(); ++i) {
      const std::int64_t want = scores[4 - m.size() + i];
      ok = m[i] == want || m[i] == 1;
    }
    if (!ok) {
      b.fail_shape(b.in_path(3), "mask " + b.describe_in(3) + " does not broadcast to the scores " +
                                     fmt_shape(scores));
    }
  }
  b.set_inferred(0, {nb, nh, ns, ne});
  if (b.outputs_checked()) return;

  const int lb = b.add_loop("b", nb, DimRole::Parallel);
  const int lh = b.add_loop("h", nh, DimRole::Parallel);
  const int ls = b.add_loop("s", ns, DimRole::Parallel);
  const int lt = b.add_loop("t", nt, DimRole::Whole);
  const int ld = b.add_loop("d", nd, DimRole::Whole);
  const int le = b.add_loop("e", ne, DimRole::Parallel);
  const std::array<std::array<int, 4>, 3> qkv{
      {{lb, lh, ls, ld}, {lb, lh, lt, ld}, {lb, lh, lt, le}}};
  for (std::size_t j = 0; j < 3; ++j) {
    for (std::size_t d = 0; d < 4; ++d) b.map_in(j, d, qkv[j][d]);
  }
  if (b.num_inputs() == 4) {
    const ir::Shape& m = b.in(3);
    const std::array<int, 4> score_loops{lb, lh, ls, lt};
    for (std::size_t i = 0; i < m.size(); ++i) {
      const std::size_t s = 4 - m.size() + i;
      if (m[i] == 1 && scores[s] != 1) continue;
      b.map_in(3, i, score_loops[s]);
    }
  }
  const std::array<int, 4> outl{lb, lh, ls, le};
  for (std::size_t d = 0; d < 4; ++d) b.map_out(0, d, outl[d]);
  b.set_flops(4.0 * product_d(std::array<std::int64_t, 5>{nb, nh, ns, nt, nd}));
}

}  // namespace recsearch::algebra::detail
