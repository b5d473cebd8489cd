// SPDX-License-Identifier: Apache-2.0
// The sweep's HTML page: line charts as inline SVG, computed here down to
// every tick and point, so that the page needs no script and opens offline.
// Budget sweeps draw step time (with its compute and communication parts)
// and memory (with its parameter and activation parts) against the budget,
// the knee marked; device sweeps draw throughput, scaling efficiency and
// step time against the device count on a log2 axis. A table of every
// point, no-fit ones included, follows.
#include "sweep_html.hpp"

#include "recsearch/report/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace recsearch::detail {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string esc(const std::string& s) { return report::html_escape(s); }

struct Series {
  Series(std::string n, std::string c, bool d = false)
      : name(std::move(n)), color(std::move(c)), dashed(d) {}
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;
  bool dashed = false;
};

struct Chart {
  Chart(std::string t, std::string x, std::string y, bool log2 = false)
      : title(std::move(t)), x_label(std::move(x)), y_label(std::move(y)), log2_x(log2) {}
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log2_x = false;
  std::vector<Series> series;
  std::optional<double> mark_x;  // a vertical marker (the knee)
  std::string mark_label;
  std::vector<double> no_fit_x;  // crosses on the x axis
};

// Tick step of 1, 2 or 5 times a power of ten giving about `n` ticks.
double nice_step(double span, int n) {
  if (!(span > 0)) return 1;
  const double raw = span / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

std::string tick_text(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e5 || a < 1e-3) return fmt("%.0e", v);
  return fmt("%.4g", v);
}

class Plot {
 public:
  explicit Plot(const Chart& c) : c_(c) {
    double x_lo = INFINITY, x_hi = -INFINITY, y_hi = 0;
    for (const Series& s : c.series)
      for (auto [x, y] : s.points) {
        x_lo = std::min(x_lo, x);
        x_hi = std::max(x_hi, x);
        y_hi = std::max(y_hi, y);
      }
    for (double x : c.no_fit_x) {
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
    }
    if (!std::isfinite(x_lo)) x_lo = x_hi = 1;
    if (x_lo == x_hi) {
      x_lo = c.log2_x ? x_lo / 2 : x_lo - 1;
      x_hi = c.log2_x ? x_hi * 2 : x_hi + 1;
    }
    x_lo_ = c.log2_x ? std::log2(x_lo) : x_lo;
    x_hi_ = c.log2_x ? std::log2(x_hi) : x_hi;
    y_step_ = nice_step(y_hi > 0 ? y_hi : 1, 5);
    y_hi_ = std::ceil((y_hi > 0 ? y_hi * 1.02 : 1) / y_step_) * y_step_;
  }

  std::string svg() const {
    std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kW) +
                    "\" height=\"" + num(kH) + "\" viewBox=\"0 0 " + num(kW) + " " + num(kH) +
                    "\" role=\"img\">\n<title>" + esc(c_.title) + "</title>\n";
    o += text(kW / 2, 20, c_.title, "middle", "title");
    axes(o);
    if (c_.mark_x) marker(o);
    for (const Series& s : c_.series) line(o, s);
    for (double x : c_.no_fit_x) cross(o, sx(x), kT + plot_h());
    legend(o);
    return o + "</svg>\n";
  }

 private:
  static constexpr double kW = 660, kH = 360, kL = 72, kR = 24, kT = 46, kB = 52;
  static double plot_w() { return kW - kL - kR; }
  static double plot_h() { return kH - kT - kB; }
  static std::string num(double v) { return fmt("%.1f", v); }

  double sx(double x) const {
    const double v = c_.log2_x ? std::log2(x) : x;
    return kL + (v - x_lo_) / (x_hi_ - x_lo_) * plot_w();
  }
  double sy(double y) const { return kT + plot_h() - y / y_hi_ * plot_h(); }

  static std::string text(double x, double y, const std::string& t, const char* anchor,
                          const char* cls) {
    return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor +
           "\" class=\"" + cls + "\">" + esc(t) + "</text>\n";
  }

  void axes(std::string& o) const {
    // Horizontal grid and y ticks.
    for (double y = 0; y <= y_hi_ * (1 + 1e-9); y += y_step_) {
      o += "<line x1=\"" + num(kL) + "\" x2=\"" + num(kL + plot_w()) + "\" y1=\"" + num(sy(y)) +
           "\" y2=\"" + num(sy(y)) + "\" class=\"grid\"/>\n";
      o += text(kL - 6, sy(y) + 4, tick_text(y), "end", "tick");
    }
    // x ticks: powers of two on a log2 axis, nice steps otherwise.
    std::vector<double> xs;
    if (c_.log2_x) {
      const int step = std::max(1, static_cast<int>(std::ceil((x_hi_ - x_lo_) / 12)));
      for (int e = static_cast<int>(std::ceil(x_lo_)); e <= x_hi_ + 1e-9; e += step)
        xs.push_back(std::exp2(e));
    } else {
      const double st = nice_step(x_hi_ - x_lo_, 8);
      for (double x = std::ceil(x_lo_ / st) * st; x <= x_hi_ + 1e-9 * st; x += st) xs.push_back(x);
    }
    for (double x : xs) {
      o += "<line x1=\"" + num(sx(x)) + "\" x2=\"" + num(sx(x)) + "\" y1=\"" + num(kT) +
           "\" y2=\"" + num(kT + plot_h()) + "\" class=\"grid\"/>\n";
      o += text(sx(x), kT + plot_h() + 16, tick_text(x), "middle", "tick");
    }
    o += "<rect x=\"" + num(kL) + "\" y=\"" + num(kT) + "\" width=\"" + num(plot_w()) +
         "\" height=\"" + num(plot_h()) + "\" class=\"frame\"/>\n";
    o += text(kL + plot_w() / 2, kH - 12, c_.x_label, "middle", "label");
    o += "<text transform=\"translate(16," + num(kT + plot_h() / 2) +
         ") rotate(-90)\" text-anchor=\"middle\" class=\"label\">" + esc(c_.y_label) + "</text>\n";
  }

  void marker(std::string& o) const {
    const double x = sx(*c_.mark_x);
    o += "<line x1=\"" + num(x) + "\" x2=\"" + num(x) + "\" y1=\"" + num(kT) + "\" y2=\"" +
         num(kT + plot_h()) + "\" class=\"knee\"/>\n";
    // Above the frame, clear of the curves and the legend; centred on the
    // marker unless that would run past the frame's ends.
    const double half = 3.5 * static_cast<double>(c_.mark_label.size());
    const double at = std::clamp(x, kL + half, kL + plot_w() - half);
    o += text(at, kT - 5, c_.mark_label, "middle", "kneetext");
  }

  void line(std::string& o, const Series& s) const {
    if (s.points.empty()) return;
    std::string pts;
    for (auto [x, y] : s.points) pts += num(sx(x)) + "," + num(sy(y)) + " ";
    o += "<polyline fill=\"none\" stroke=\"" + s.color + "\" stroke-width=\"2\"" +
         (s.dashed ? " stroke-dasharray=\"6 4\"" : "") + " points=\"" + pts + "\"/>\n";
    if (s.dashed) return;
    for (auto [x, y] : s.points)
      o += "<circle cx=\"" + num(sx(x)) + "\" cy=\"" + num(sy(y)) + "\" r=\"3\" fill=\"" + s.color +
           "\"/>\n";
  }

  static void cross(std::string& o, double x, double y) {
    o += "<path d=\"M" + num(x - 5) + "," + num(y - 5) + "l10,10M" + num(x - 5) + "," + num(y + 5) +
         "l10,-10\" class=\"nofit\"/>\n";
  }

  void legend(std::string& o) const {
    double y = kT + 16;
    const double x = kL + plot_w() - 190;
    o += "<rect x=\"" + num(x - 8) + "\" y=\"" + num(kT + 4) + "\" width=\"190\" height=\"" +
         num(16.0 * static_cast<double>(c_.series.size() + (c_.no_fit_x.empty() ? 0 : 1)) + 8) +
         "\" class=\"legend\"/>\n";
    for (const Series& s : c_.series) {
      o += "<line x1=\"" + num(x) + "\" x2=\"" + num(x + 18) + "\" y1=\"" + num(y - 4) +
           "\" y2=\"" + num(y - 4) + "\" stroke=\"" + s.color + "\" stroke-width=\"2\"" +
           (s.dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n";
      o += text(x + 24, y, s.name, "start", "tick");
      y += 16;
    }
    if (!c_.no_fit_x.empty()) {
      cross(o, x + 9, y - 4);
      o += text(x + 24, y, "no plan fits", "start", "tick");
    }
  }

  const Chart& c_;
  double x_lo_ = 0, x_hi_ = 1, y_hi_ = 1, y_step_ = 1;
};

std::string figure(const Chart& c, const std::string& caption) {
  return "<figure>\n" + Plot(c).svg() + "<figcaption>" + caption + "</figcaption>\n</figure>\n";
}

// The bubble is drawn only where some point has stages.
bool has_bubble(const Sweep& s) {
  return std::any_of(s.points.begin(), s.points.end(),
                     [](const SweepPoint& p) { return p.fits && p.bubble_s > 0; });
}

std::string budget_charts(const Sweep& s) {
  Chart step{"Step time against memory budget", "memory budget per device (GiB)", "seconds"};
  Chart mem{"Memory per device against budget", "memory budget per device (GiB)", "GiB"};
  Series total{"step time", "#1f5fa8"}, compute{"compute", "#3a9a4a"},
      comm{"communication", "#d0802a"}, bubble{"pipeline bubble", "#b03a5a"};
  Series used{"memory", "#1f5fa8"}, params{"parameter state", "#8a4fb0"},
      grads{"of which gradients", "#8a4fb0", true}, optim{"of which optimizer", "#c9a0dc", true},
      acts{"activations", "#3a9a4a"}, budget{"budget", "#999999", true};
  for (const SweepPoint& p : s.points) {
    const double b = p.budget_bytes / kGiB;
    budget.points.emplace_back(b, b);
    if (!p.fits) {
      step.no_fit_x.push_back(b);
      mem.no_fit_x.push_back(b);
      continue;
    }
    total.points.emplace_back(b, p.summary.step_time_s);
    compute.points.emplace_back(b, p.summary.compute_s);
    comm.points.emplace_back(b, p.summary.communication_s);
    bubble.points.emplace_back(b, p.bubble_s);
    used.points.emplace_back(b, p.summary.memory_per_device_bytes / kGiB);
    params.points.emplace_back(b, p.summary.parameter_bytes / kGiB);
    grads.points.emplace_back(b, p.summary.gradient_bytes / kGiB);
    optim.points.emplace_back(b, p.summary.optimizer_bytes / kGiB);
    acts.points.emplace_back(b, p.summary.activation_bytes / kGiB);
  }
  step.series = {total, compute, comm};
  if (has_bubble(s)) step.series.push_back(bubble);
  mem.series = {used, params};
  if (s.mode == Mode::Train) mem.series.insert(mem.series.end(), {grads, optim});
  mem.series.insert(mem.series.end(), {acts, budget});
  std::string caption = "No knee: no budget fits a plan.";
  if (s.knee < s.points.size()) {
    const SweepPoint& k = s.points[s.knee];
    step.mark_x = mem.mark_x = k.budget_bytes / kGiB;
    step.mark_label = mem.mark_label = "knee " + fmt("%.4g", *step.mark_x) + " GiB";
    caption = "Knee: " + fmt("%.4g", *step.mark_x) + " GiB, the smallest budget whose step (" +
              fmt("%.4g", k.summary.step_time_s) + " s) is within " +
              fmt("%.0f", s.knee_tolerance * 100) + "% of the best of the sweep.";
  }
  return figure(step, caption) +
         figure(mem, "Memory the reported plan needs; the dashed line is the budget itself.");
}

std::string device_charts(const Sweep& s) {
  const bool samples = s.batch > 0;
  Chart thr{"Throughput against devices", "devices",
            samples ? "samples per second" : "steps per second", true};
  Chart eff{"Scaling efficiency against devices", "devices", "throughput per device, relative",
            true};
  Chart step{"Step time against devices", "devices", "seconds", true};
  Series t{samples ? "samples/s" : "steps/s", "#1f5fa8"}, e{"efficiency", "#3a9a4a"},
      st{"step time", "#1f5fa8"}, compute{"compute", "#3a9a4a"}, comm{"communication", "#d0802a"},
      bubble{"pipeline bubble", "#b03a5a"};
  for (const SweepPoint& p : s.points) {
    const double d = static_cast<double>(p.devices);
    if (!p.fits) {
      for (Chart* c : {&thr, &eff, &step}) c->no_fit_x.push_back(d);
      continue;
    }
    t.points.emplace_back(d, samples ? p.samples_per_s : 1 / p.summary.step_time_s);
    e.points.emplace_back(d, p.scaling_efficiency);
    st.points.emplace_back(d, p.summary.step_time_s);
    compute.points.emplace_back(d, p.summary.compute_s);
    comm.points.emplace_back(d, p.summary.communication_s);
    bubble.points.emplace_back(d, p.bubble_s);
  }
  thr.series = {t};
  eff.series = {e};
  step.series = {st, compute, comm};
  if (has_bubble(s)) step.series.push_back(bubble);
  if (s.knee < s.points.size()) {
    step.mark_x = thr.mark_x = static_cast<double>(s.points[s.knee].devices);
    step.mark_label = thr.mark_label = "fastest";
  }
  return figure(thr, "The graph's batch is fixed: more devices split the same step.") +
         figure(eff,
                "Throughput per device relative to the first point that fits (1 = linear "
                "scaling).") +
         figure(step, "Step time and its parts; the marker is the fastest point.");
}

std::string cell(double v, const char* f = "%.4g") {
  return "<td>" + (std::isfinite(v) && v > 0 ? fmt(f, v) : std::string("&ndash;")) + "</td>";
}

// The memory-saving dimensions a plan uses, in words ("selective, ZeRO 2,
// 4 microbatches, 8 stages x 2"); empty in inference and when it uses none.
std::string savings(const SweepPoint& p) {
  if (p.plan.mode != Mode::Train) return {};
  const plan::Training& t = p.plan.training;
  std::string o;
  const auto add = [&o](const std::string& part) { o += (o.empty() ? "" : ", ") + part; };
  // Per-block recomputation and per-parameter ZeRO in words
  // (report::recompute_text, zero_text) where the plan differs per operator.
  const std::string rc(plan::recompute_name(t.recompute));
  if (!p.recompute_text.empty() && p.recompute_text != rc) add(p.recompute_text);
  else if (t.recompute != plan::Recompute::None) add(rc);
  if (!p.zero_text.empty() && p.zero_text != std::to_string(t.zero_stage))
    add("ZeRO " + p.zero_text);
  else if (t.zero_stage > 0) add("ZeRO " + std::to_string(t.zero_stage));
  if (t.microbatches > 1) add(std::to_string(t.microbatches) + " microbatches");
  if (p.pipeline.groups > 1)
    add(std::to_string(p.pipeline.groups) + " stages" +
        (p.pipeline.virtual_stages > 1 ? " x " + std::to_string(p.pipeline.virtual_stages) : ""));
  return o;
}

std::string table(const Sweep& s) {
  std::string o =
      "<table>\n<tr><th>budget (GiB)</th><th>devices</th><th>mesh</th><th>step (s)</th>"
      "<th>compute (s)</th><th>comm (s)</th><th>memory (GiB)</th><th>params (GiB)</th>"
      "<th>activations (GiB)</th><th>bubble (s)</th><th>samples/s</th><th>TFLOP/s per device</th>"
      "<th>memory savings</th>";
  o += s.kind == SweepKind::Devices ? "<th>efficiency</th>" : "<th>plan found at (GiB)</th>";
  o += "<th>note</th></tr>\n";
  for (std::size_t i = 0; i < s.points.size(); ++i) {
    const SweepPoint& p = s.points[i];
    o += i == s.knee ? "<tr class=\"kneerow\">" : "<tr>";
    o += cell(p.budget_bytes / kGiB) + "<td>" + std::to_string(p.devices) + "</td><td>" +
         esc(p.mesh) + "</td>";
    if (p.fits) {
      const plan::Summary& m = p.summary;
      o += cell(m.step_time_s) + cell(m.compute_s) + cell(m.communication_s) +
           cell(m.memory_per_device_bytes / kGiB) + cell(m.parameter_bytes / kGiB) +
           cell(m.activation_bytes / kGiB) + cell(p.bubble_s) + cell(p.samples_per_s) +
           cell(p.model_tflops_per_device, "%.3g") + "<td>" + esc(savings(p)) + "</td>";
      o += s.kind == SweepKind::Devices ? cell(p.scaling_efficiency, "%.3f")
                                        : cell(s.points[p.found_at].budget_bytes / kGiB);
      o += "<td>" +
           std::string(i == s.knee ? (s.kind == SweepKind::Memory ? "knee" : "fastest") : "") +
           "</td>";
    } else {
      o += "<td colspan=\"11\" class=\"nofitrow\">no plan fits; smallest reached " +
           (std::isfinite(p.smallest_bytes) ? fmt("%.4g", p.smallest_bytes / kGiB) + " GiB"
                                            : std::string("unknown")) +
           "</td><td class=\"note\">" + esc(p.no_fit) + "</td>";
    }
    o += "</tr>\n";
  }
  return o + "</table>\n";
}

constexpr const char* kStyle = R"(<style>
body { font-family: sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } p.meta { color: #555; }
figure { display: inline-block; margin: 8px 16px 16px 0; vertical-align: top; }
figcaption { font-size: 13px; color: #444; max-width: 640px; }
svg text { font-family: sans-serif; }
.title { font-size: 15px; font-weight: bold; } .tick { font-size: 11px; fill: #333; }
.label { font-size: 12px; fill: #222; }
.grid { stroke: #e4e4e4; } .frame { fill: none; stroke: #888; }
.knee { stroke: #c0392b; stroke-width: 1.5; stroke-dasharray: 4 3; }
.kneetext { font-size: 12px; fill: #c0392b; }
.nofit { stroke: #c0392b; stroke-width: 2; fill: none; }
.legend { fill: #fff; fill-opacity: 0.85; stroke: #ccc; }
table { border-collapse: collapse; font-size: 13px; margin-top: 12px; }
td, th { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
th { background: #f0f0f0; } tr.kneerow { background: #fdecea; }
td.nofitrow { color: #c0392b; text-align: left; } td.note { text-align: left; }
</style>
)";

}  // namespace

std::string sweep_html(const Sweep& s) {
  const bool memory = s.kind == SweepKind::Memory;
  std::string o = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
                  esc("recsearch sweep: " + s.graph) + "</title>\n" + kStyle + "</head>\n<body>\n";
  o += "<h1>" + esc(s.graph) + ": step time against " +
       (memory ? "memory budget" : "cluster size") + "</h1>\n";
  o += "<p class=\"meta\">" + std::string(s.mode == Mode::Train ? "training" : "inference") +
       ", algorithm " + esc(s.algorithm) + ", " + std::to_string(s.points.size()) + " points";
  if (s.batch > 0) o += ", batch " + std::to_string(s.batch);
  if (s.step_flops > 0) o += ", " + fmt("%.4g", s.step_flops / 1e12) + " TFLOP per step";
  o += memory ? ". At each budget the fastest plan the sweep found that fits it is reported."
              : ". Each cluster is searched on its own.";
  o += "</p>\n";
  o += memory ? budget_charts(s) : device_charts(s);
  o += table(s);
  return o + "</body>\n</html>\n";
}

}  // namespace recsearch::detail
