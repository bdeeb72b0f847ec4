// einsum lowered to the emulated matmul (tcemu.emulation.contractions.einsum), for one or two operands: with
// three or more, tcemu's Python follows opt_einsum's contraction path, which this library does not reproduce
// (it raises instead of computing in another order).
#include "tcemu_native.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace tcemu {

namespace {

using Labels = std::vector<std::string>;

const std::string kEllipsis = "...";

Labels split_term(const std::string& term) {
  Labels out;
  for (size_t i = 0; i < term.size();) {
    if (term.compare(i, 3, kEllipsis) == 0) {
      out.push_back(kEllipsis);
      i += 3;
    } else {
      out.push_back(term.substr(i, 1));
      i += 1;
    }
  }
  return out;
}

bool is_ellipsis_label(const std::string& s) { return s.size() > 1 && s[0] == '.'; }

std::string strip_spaces(const std::string& equation) {
  std::string eq;
  for (char c : equation) {
    if (c != ' ') eq.push_back(c);
  }
  return eq;
}

// per-operand labels and the output labels; ellipsis dimensions become ".k" labels aligned from the right
std::pair<std::vector<Labels>, Labels> labels_of(const std::string& equation, const std::vector<Tensor>& operands) {
  const std::string eq = strip_spaces(equation);
  const auto arrow = eq.find("->");
  const std::string lhs = arrow == std::string::npos ? eq : eq.substr(0, arrow);
  std::vector<Labels> terms;
  size_t start = 0;
  while (true) {
    const auto comma = lhs.find(',', start);
    terms.push_back(split_term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::vector<int64_t> n_ell;
  int64_t width = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    const bool has = std::find(terms[i].begin(), terms[i].end(), kEllipsis) != terms[i].end();
    n_ell.push_back(has ? operands[i].dim() - static_cast<int64_t>(terms[i].size() - 1) : 0);
    width = std::max(width, n_ell.back());
  }
  std::vector<Labels> per_op;
  for (size_t t = 0; t < terms.size(); ++t) {
    Labels lab;
    for (const auto& s : terms[t]) {
      if (s == kEllipsis) {
        for (int64_t i = 0; i < n_ell[t]; ++i) lab.push_back("." + std::to_string(width - n_ell[t] + i));
      } else {
        lab.push_back(s);
      }
    }
    per_op.push_back(lab);
  }
  Labels ell_out;
  for (int64_t i = 0; i < width; ++i) ell_out.push_back("." + std::to_string(i));
  Labels out;
  if (arrow != std::string::npos) {
    for (const auto& s : split_term(eq.substr(arrow + 2))) {
      if (s == kEllipsis) {
        out.insert(out.end(), ell_out.begin(), ell_out.end());
      } else {
        out.push_back(s);
      }
    }
  } else {
    std::map<std::string, int> counts;
    for (const auto& lab : per_op) {
      for (const auto& s : lab) {
        if (!is_ellipsis_label(s)) counts[s] += 1;
      }
    }
    out = ell_out;
    for (const auto& [s, c] : counts) {  // (a std::map iterates in sorted order)
      if (c == 1) out.push_back(s);
    }
  }
  return {per_op, out};
}

int64_t index_of(const Labels& labels, const std::string& s) {
  return std::find(labels.begin(), labels.end(), s) - labels.begin();
}

bool contains(const Labels& labels, const std::string& s) {
  return std::find(labels.begin(), labels.end(), s) != labels.end();
}

std::pair<Tensor, Labels> take_diagonals(Tensor x, Labels labels) {
  while (std::set<std::string>(labels.begin(), labels.end()).size() < labels.size()) {
    for (size_t i = 0; i < labels.size(); ++i) {
      const auto j = std::find(labels.begin() + i + 1, labels.end(), labels[i]) - labels.begin();
      if (j < static_cast<int64_t>(labels.size())) {
        const auto s = labels[i];
        x = x.diagonal(0, static_cast<int64_t>(i), j);
        Labels rest;
        for (size_t k = 0; k < labels.size(); ++k) {
          const auto at = static_cast<int64_t>(k);
          if (at != static_cast<int64_t>(i) && at != j) rest.push_back(labels[k]);
        }
        rest.push_back(s);
        labels = rest;
        break;
      }
    }
  }
  return {x, labels};
}

std::pair<Tensor, Labels> sum_out(const Tensor& x, const Labels& labels, const std::set<std::string>& keep) {
  std::vector<int64_t> dims;
  Labels kept;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (keep.count(labels[i])) {
      kept.push_back(labels[i]);
    } else {
      dims.push_back(static_cast<int64_t>(i));
    }
  }
  if (dims.empty()) return {x, labels};
  return {x.sum(dims), kept};
}

Tensor permute_to(const Tensor& x, const Labels& labels, const Labels& order) {
  std::vector<int64_t> perm;
  for (const auto& s : order) perm.push_back(index_of(labels, s));
  return x.permute(perm);
}

std::pair<Tensor, Labels> contract_pair(Tensor a, Labels la, Tensor b, Labels lb, const std::set<std::string>& keep,
                                        const std::string& method) {
  auto keep_a = keep, keep_b = keep;
  keep_a.insert(lb.begin(), lb.end());
  std::tie(a, la) = sum_out(a, la, keep_a);
  keep_b.insert(la.begin(), la.end());
  std::tie(b, lb) = sum_out(b, lb, keep_b);
  Labels summed;
  for (const auto& s : la) {
    if (contains(lb, s) && !keep.count(s)) summed.push_back(s);
  }
  // a summed label of size 1 on one side broadcasts: sum the other side over it first (as torch does)
  for (const auto& s : summed) {
    const auto da = a.size(index_of(la, s)), db = b.size(index_of(lb, s));
    if (da == 1 && db > 1) {
      b = b.sum({index_of(lb, s)}, /*keepdim=*/true);
    } else if (db == 1 && da > 1) {
      a = a.sum({index_of(la, s)}, /*keepdim=*/true);
    }
  }
  Labels ones, still;
  for (const auto& s : summed) (a.size(index_of(la, s)) == 1 ? ones : still).push_back(s);
  if (!ones.empty()) {  // size 1 on both sides: a sum over one term
    std::vector<int64_t> dims_a, dims_b;
    Labels la2, lb2;
    for (const auto& s : ones) {
      dims_a.push_back(index_of(la, s));
      dims_b.push_back(index_of(lb, s));
    }
    for (const auto& s : la) {
      if (!contains(ones, s)) la2.push_back(s);
    }
    for (const auto& s : lb) {
      if (!contains(ones, s)) lb2.push_back(s);
    }
    a = a.squeeze(dims_a);
    b = b.squeeze(dims_b);
    la = la2;
    lb = lb2;
    summed = still;
  }
  Labels batch, a_only, b_only;
  for (const auto& s : la) {
    if (contains(lb, s) && keep.count(s)) batch.push_back(s);
    if (!contains(lb, s)) a_only.push_back(s);
  }
  for (const auto& s : lb) {
    if (!contains(la, s)) b_only.push_back(s);
  }
  std::map<std::string, int64_t> size;
  auto grow = [&size](const std::string& s, int64_t n) { size[s] = std::max<int64_t>(size.count(s) ? size[s] : 1, n); };
  for (size_t i = 0; i < la.size(); ++i) grow(la[i], a.size(i));
  for (size_t i = 0; i < lb.size(); ++i) grow(lb[i], b.size(i));
  auto cat = [](Labels x, const Labels& y) {
    x.insert(x.end(), y.begin(), y.end());
    return x;
  };
  const auto nb = static_cast<int64_t>(batch.size());
  if (summed.empty()) {  // no accumulation: an elementwise / outer product, exactly as torch computes it
    auto ap = permute_to(a, la, cat(batch, a_only));
    auto bp = permute_to(b, lb, cat(batch, b_only));
    auto shape_a = ap.sizes().vec();
    shape_a.insert(shape_a.end(), b_only.size(), 1);
    std::vector<int64_t> shape_b(bp.sizes().begin(), bp.sizes().begin() + nb);
    shape_b.insert(shape_b.end(), a_only.size(), 1);
    shape_b.insert(shape_b.end(), bp.sizes().begin() + nb, bp.sizes().end());
    return {ap.reshape(shape_a) * bp.reshape(shape_b), cat(cat(batch, a_only), b_only)};
  }
  int64_t m = 1, n = 1, k = 1;
  for (const auto& s : a_only) m *= size[s];
  for (const auto& s : b_only) n *= size[s];
  for (const auto& s : summed) k *= size[s];
  auto a3 = permute_to(a, la, cat(cat(batch, a_only), summed));
  std::vector<int64_t> shape3(a3.sizes().begin(), a3.sizes().begin() + nb);
  shape3.push_back(m);
  shape3.push_back(k);
  a3 = a3.reshape(shape3);
  auto b3 = permute_to(b, lb, cat(cat(batch, summed), b_only));
  shape3.assign(b3.sizes().begin(), b3.sizes().begin() + nb);
  shape3.push_back(k);
  shape3.push_back(n);
  b3 = b3.reshape(shape3);
  auto out = matmul(a3, b3, method);
  std::vector<int64_t> shape(out.sizes().begin(), out.sizes().begin() + nb);
  for (const auto& s : a_only) shape.push_back(size[s]);
  for (const auto& s : b_only) shape.push_back(size[s]);
  return {out.reshape(shape), cat(cat(batch, a_only), b_only)};
}

std::vector<int64_t> meta_shape(const std::string& equation, const std::vector<Tensor>& operands) {
  std::vector<Tensor> metas;
  for (const auto& o : operands) metas.push_back(at::empty(o.sizes(), at::TensorOptions().device(at::kMeta)));
  return at::einsum(equation, metas).sizes().vec();  // torch's own checks of the equation and shapes
}

}  // namespace

bool einsum_contracts(const std::string& equation, const std::vector<Tensor>& operands) {
  if (operands.size() < 2) return false;
  meta_shape(equation, operands);
  auto [per_op, out] = labels_of(equation, operands);
  std::map<std::string, int> seen;  // operands in which a label has more than one element
  for (size_t i = 0; i < per_op.size(); ++i) {
    std::set<std::string> done;
    for (const auto& s : per_op[i]) {
      if (done.insert(s).second && operands[i].size(index_of(per_op[i], s)) > 1) seen[s] += 1;
    }
  }
  for (const auto& [s, c] : seen) {
    if (c > 1 && !contains(out, s)) return true;
  }
  return false;
}

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands, const std::string& method) {
  TORCH_CHECK(operands.size() <= 2, "tcemu (native): einsum with ", operands.size(), " operands (", equation,
              ") is not in the native library (tcemu's Python follows opt_einsum's order there); emulate the model in "
              "Python, or write the contraction as pairwise einsums");
  const auto shape = meta_shape(equation, operands);
  for (const auto& o : operands) {
    if (o.numel() == 0) return at::einsum(equation, operands);  // nothing to emulate
  }
  auto [per_op, out] = labels_of(equation, operands);
  std::vector<std::pair<Tensor, Labels>> items;
  for (size_t i = 0; i < operands.size(); ++i) items.push_back(take_diagonals(operands[i], per_op[i]));
  const std::set<std::string> out_labels(out.begin(), out.end());
  if (items.size() == 2) {
    items = {contract_pair(items[0].first, items[0].second, items[1].first, items[1].second, out_labels, method)};
  }
  auto [x, lab] = sum_out(items[0].first, items[0].second, out_labels);
  x = permute_to(x, lab, out);
  return x.sizes().vec() == shape ? x : x.expand(shape);
}

}  // namespace tcemu
