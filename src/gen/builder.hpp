// SPDX-License-Identifier: Apache-2.0
// The generators' pen: names tensors and operators under a prefix
// ("h12.q_proj") and hands them to the sink. It owns no graph, so a
// generator's memory stays constant however many operators it emits.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "recsearch/gen/generate.hpp"

namespace recsearch::gen {

class Builder {
 public:
  Builder(GraphSink& sink, ir::DType dtype) : sink_(sink), dtype_(dtype) {}

  void set_prefix(std::string p) { prefix_ = std::move(p); }

  // Emits a tensor named prefix+name and returns that full name.
  std::string tensor(const std::string& name, const ir::Shape& shape, ir::TensorKind kind,
                     ir::DType dtype) {
    std::string full = prefix_ + name;
    sink_.tensor(full, shape, dtype, kind);
    return full;
  }
  std::string tensor(const std::string& name, const ir::Shape& shape, ir::TensorKind kind) {
    return tensor(name, shape, kind, dtype_);
  }
  // An activation: declared as an input, promoted when its operator is added.
  std::string act(const std::string& name, const ir::Shape& shape) {
    return tensor(name, shape, ir::TensorKind::Input);
  }
  std::string param(const std::string& name, const ir::Shape& shape) {
    return tensor(name, shape, ir::TensorKind::Parameter);
  }
  std::string constant(const std::string& name, const ir::Shape& shape) {
    return tensor(name, shape, ir::TensorKind::Constant);
  }

  // Emits operator prefix+name; inputs and outputs are full tensor names.
  void op(const std::string& name, std::string_view type,
          std::initializer_list<std::string_view> inputs,
          std::initializer_list<std::string_view> outputs, const ir::Attrs& attrs = {}) {
    const std::string full = prefix_ + name;
    sink_.op(full, type, {inputs.begin(), inputs.size()}, {outputs.begin(), outputs.size()}, attrs);
  }

 private:
  GraphSink& sink_;
  ir::DType dtype_;
  std::string prefix_;
};

}  // namespace recsearch::gen
