// tcemu_host: a LibTorch program (no Python) that runs an emulated metatomic model and prints energy and forces.
//
//   tcemu_host MODEL.pt ATOMS.txt [--library libtcemu_native.so] [--extensions-dir DIR] [--device cpu|cuda]
//              [--deterministic 1]
//
// MODEL.pt is written by tcemu.native.export_script: its graphs call the tcemu:: ops. They come from
// libtcemu_native.so, loaded either explicitly (--library: dlopen, as torch.ops.load_library does) or by metatomic's
// extension mechanism (load_atomistic_model loads the libraries listed in the model's "extensions" metadata: what
// LAMMPS's metatomic pair style does). ATOMS.txt: the number of atoms, then one "type x y z" line per atom
// (angstrom, no periodic boundaries). The neighbor lists the model requests are computed here by brute force,
// pairs in (i, j) order; tcemu's tests build the same lists in Python to compare the bits. --deterministic 1: torch's
// deterministic algorithms (on CUDA, PET's backward scatters forces with index_add, whose atomics add in a different
// order at each run: bit comparisons need the deterministic kernels, on both sides).
#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <metatomic/torch.hpp>
#include <torch/script.h>
#include <torch/torch.h>

namespace {

struct Atoms {
  std::vector<int32_t> types;
  std::vector<float> positions;  // n x 3
};

Atoms read_atoms(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  size_t n = 0;
  in >> n;
  Atoms atoms;
  for (size_t i = 0; i < n; ++i) {
    int32_t type;
    float x, y, z;
    if (!(in >> type >> x >> y >> z)) throw std::runtime_error("bad atom line in " + path);
    atoms.types.push_back(type);
    atoms.positions.insert(atoms.positions.end(), {x, y, z});
  }
  return atoms;
}

// pairs (i, j) with |r_j - r_i| < cutoff, j != i (full list) or j > i (half list), in (i, j) order
metatensor_torch::TensorBlock neighbors(const torch::Tensor& positions, const Atoms& atoms, double cutoff,
                                        bool full_list) {
  const int64_t n = static_cast<int64_t>(atoms.types.size());
  std::vector<int32_t> samples;
  std::vector<int64_t> first, second;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = full_list ? 0 : i + 1; j < n; ++j) {
      if (j == i) continue;
      double d2 = 0;
      for (int c = 0; c < 3; ++c) {
        const double d = static_cast<double>(atoms.positions[3 * j + c]) - atoms.positions[3 * i + c];
        d2 += d * d;
      }
      if (d2 < cutoff * cutoff) {
        samples.insert(samples.end(), {static_cast<int32_t>(i), static_cast<int32_t>(j), 0, 0, 0});
        first.push_back(i);
        second.push_back(j);
      }
    }
  }
  const auto count = static_cast<int64_t>(first.size());
  auto sample_values = torch::tensor(samples, torch::kInt32).reshape({count, 5});
  auto index = [&](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kInt64).to(positions.device()); };
  // the pair vectors from the positions with torch ops: the forces flow back through them
  auto vectors = positions.index_select(0, index(second)) - positions.index_select(0, index(first));
  vectors = vectors.reshape({count, 3, 1});
  auto labels = [&](std::vector<std::string> names, torch::Tensor values) {
    return torch::make_intrusive<metatensor_torch::LabelsHolder>(torch::IValue(names), values.to(positions.device()));
  };
  auto samples_labels = labels({"first_atom", "second_atom", "cell_shift_a", "cell_shift_b", "cell_shift_c"},
                               sample_values);
  auto xyz = labels({"xyz"}, torch::arange(3, torch::kInt32).reshape({3, 1}));
  auto distance = labels({"distance"}, torch::zeros({1, 1}, torch::kInt32));
  return torch::make_intrusive<metatensor_torch::TensorBlockHolder>(vectors, samples_labels, std::vector{xyz},
                                                                    distance);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: tcemu_host MODEL.pt ATOMS.txt [--library LIB.so] [--extensions-dir DIR] [--device D] "
                 "[--deterministic 1]\n";
    return 2;
  }
  std::string model_path = argv[1], atoms_path = argv[2], library, device_name = "cpu";
  c10::optional<std::string> extensions_dir;
  bool deterministic = false;
  for (int i = 3; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--library") library = argv[i + 1];
    else if (flag == "--extensions-dir") extensions_dir = std::string(argv[i + 1]);
    else if (flag == "--device") device_name = argv[i + 1];
    else if (flag == "--deterministic") deterministic = std::string(argv[i + 1]) == "1";
    else {
      std::cerr << "unknown option " << flag << "\n";
      return 2;
    }
  }
  try {
    if (!library.empty() && dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      std::cerr << "tcemu_host: cannot load " << library << ": " << dlerror() << "\n";
      return 1;
    }
    torch::set_num_threads(1);  // (as tcemu's tests compare the bits)
    if (deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
    const torch::Device device(device_name);
    auto model = metatomic_torch::load_atomistic_model(model_path, extensions_dir);
    model.eval();
    model.to(device);
    auto atoms = read_atoms(atoms_path);
    const auto n = static_cast<int64_t>(atoms.types.size());
    auto positions = torch::tensor(atoms.positions).reshape({n, 3}).to(device).requires_grad_(true);
    auto types = torch::tensor(atoms.types, torch::kInt32).to(device);
    auto cell = torch::zeros({3, 3}, torch::TensorOptions().device(device));
    auto pbc = torch::zeros({3}, torch::TensorOptions().dtype(torch::kBool).device(device));
    auto system = torch::make_intrusive<metatomic_torch::SystemHolder>(types, positions, cell, pbc);
    auto requests = model.run_method("requested_neighbor_lists").toList();
    for (const auto& request : requests) {
      auto options = request.get().toCustomClass<metatomic_torch::NeighborListOptionsHolder>();
      system->add_neighbor_list(options, neighbors(positions, atoms, options->engine_cutoff("angstrom"),
                                                   options->full_list()));
    }
    auto outputs = torch::Dict<std::string, metatomic_torch::ModelOutput>();
    outputs.insert("energy", torch::make_intrusive<metatomic_torch::ModelOutputHolder>(
                                 "energy", "eV", false, std::vector<std::string>{}, ""));
    auto options = torch::make_intrusive<metatomic_torch::ModelEvaluationOptionsHolder>("angstrom", outputs,
                                                                                       torch::nullopt);
    auto systems = c10::List<metatomic_torch::System>({system});
    auto result = model.forward({systems, options, false}).toGenericDict();
    auto energy_map = result.at("energy").toCustomClass<metatensor_torch::TensorMapHolder>();
    auto energy = metatensor_torch::TensorMapHolder::block_by_id(energy_map, 0)->values().sum();
    auto forces = -torch::autograd::grad({energy}, {positions})[0];
    forces = forces.to(torch::kCPU);
    std::printf("energy %.9g\n", energy.item<float>());
    for (int64_t i = 0; i < n; ++i) {
      std::printf("force %.9g %.9g %.9g\n", forces[i][0].item<float>(), forces[i][1].item<float>(),
                  forces[i][2].item<float>());
    }
  } catch (const c10::Error& exc) {
    std::cerr << "tcemu_host: " << exc.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& exc) {
    std::cerr << "tcemu_host: " << exc.what() << "\n";
    return 1;
  }
  return 0;
}
