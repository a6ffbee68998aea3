// `mha export`: one forward (inputs as `mha compute` takes them), then a stage's heatmap as PNG, SVG
// or CSV — one head, the head average, or all heads as a grid; or, given a folder, every head and
// the average as separate files plus the grid, listed in index.json.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "errors.hpp"
#include "problem.hpp"
#include "stage_export.hpp"

namespace fs = std::filesystem;

namespace mha::cli {

namespace {

struct ExportArgs : ForwardArgs {
  std::string stage = "attn_weights", head = "0", format, colormap, out, font = MHA_DEFAULT_FONT;
  int batch_index = 0, scale = 0;
  bool transparent = false, values = false;
};

int parse_head(const std::string& h) {
  if (h == "all") return exporter::kAllHeads;
  if (h == "avg") return exporter::kHeadAverage;
  try {
    std::size_t used = 0;
    const int v = std::stoi(h, &used);
    if (used == h.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError("--head", "--head " + h + ": expected a head index, all or avg");
}

// Renders `fig` in `format` and writes it to `path`.
void write_figure(const exporter::StageFigure& fig, const std::string& format, const std::string& path) {
  if (format == "png") {
    const std::vector<std::uint8_t> png = exporter::render_png(fig.spec);
    exporter::write_file(path, png.data(), png.size());
  } else if (format == "svg") {
    const std::string svg = exporter::render_svg(fig.spec);
    exporter::write_file(path, svg.data(), svg.size());
  } else {
    if (fig.spec.panels.size() != 1)
      throw ConfigError("--format", "csv holds one 2-D slice: give --head N or --head avg, not all");
    const std::string csv = exporter::render_csv(fig.spec.panels[0]);
    exporter::write_file(path, csv.data(), csv.size());
  }
}

int run(const ExportArgs& a) {
  const Problem<float> p = build_problem<float>(a);
  const ForwardResult<float> r = forward(p.config, p.weights, p.inputs, p.options);

  exporter::StageSlice slice;
  slice.stage = a.stage;
  slice.batch_index = a.batch_index;
  slice.head = parse_head(a.head);
  if (a.colormap == "viridis") slice.colormap = app::Colormap::viridis;
  if (a.colormap == "magma") slice.colormap = app::Colormap::magma;
  if (a.colormap == "cividis") slice.colormap = app::Colormap::cividis;
  if (a.colormap == "diverging") slice.colormap = app::Colormap::diverging;
  auto style = [&](exporter::StageFigure& fig) {
    fig.spec.cell_px = a.scale;
    fig.spec.transparent = a.transparent;
    fig.spec.show_values = a.values;
    fig.spec.font_path = a.font;
  };

  // A folder: an existing directory or a path ending in '/'.
  if (a.out.empty()) throw FileError("--out", "--out is empty: give a file or a folder");
  const bool folder = fs::is_directory(a.out) || a.out.back() == '/';
  if (!folder) {
    const std::string ext = fs::path(a.out).extension().string();
    const std::string format = !a.format.empty() ? a.format
                               : ext == ".svg"   ? "svg"
                               : ext == ".csv"   ? "csv"
                                                 : "png";
    exporter::StageFigure fig = exporter::stage_figure(r, slice);
    style(fig);
    write_figure(fig, format, a.out);
    std::printf("wrote %s (%s, %zu panel%s)\n", a.out.c_str(), format.c_str(), fig.spec.panels.size(),
                fig.spec.panels.size() == 1 ? "" : "s");
    return 0;
  }

  // Batch export: each head, the average, and (for images) the grid of them all.
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec) throw FileError("--out", "--out " + a.out + ": cannot create: " + ec.message());
  const std::string format = a.format.empty() ? "png" : a.format;
  const int heads = exporter::stage_heads(r, a.stage);
  std::vector<std::pair<std::string, int>> jobs;  // file name, head
  const std::string stem = a.stage + "_b" + std::to_string(a.batch_index);
  if (!heads) {
    jobs.push_back({stem + "." + format, 0});
  } else {
    for (int h = 0; h < heads; ++h) jobs.push_back({stem + "_head" + std::to_string(h) + "." + format, h});
    jobs.push_back({stem + "_avg." + format, exporter::kHeadAverage});
    if (format != "csv") jobs.push_back({stem + "_all." + format, exporter::kAllHeads});
  }
  nlohmann::json files = nlohmann::json::array();
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    slice.head = jobs[k].second;
    exporter::StageFigure fig = exporter::stage_figure(r, slice);
    style(fig);
    write_figure(fig, format, (fs::path(a.out) / jobs[k].first).string());
    const int h = jobs[k].second;
    files.push_back(
        {{"file", jobs[k].first},
         {"head", h >= 0 ? nlohmann::json(h) : nlohmann::json(h == exporter::kAllHeads ? "all" : "avg")},
         {"title", fig.spec.title}});
    // Progress on one stderr line, so long batch exports show they are moving.
    std::fprintf(stderr, "\rexporting [%zu/%zu] %s\x1b[K", k + 1, jobs.size(), jobs[k].first.c_str());
  }
  std::fprintf(stderr, "\n");
  const std::string index =
      nlohmann::json{{"stage", a.stage}, {"batch_index", a.batch_index}, {"format", format}, {"files", files}}
          .dump(2) +
      "\n";
  exporter::write_file((fs::path(a.out) / "index.json").string(), index.data(), index.size());
  std::printf("wrote %zu files and index.json to %s\n", jobs.size(), a.out.c_str());
  return 0;
}

}  // namespace

std::function<int()> add_export(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "A stage's heatmap as a PNG or SVG figure (title, token labels, colorbar, masked cells, NaN rows)\n"
      "or a CSV slice, from the same inputs as `mha compute`. --out FILE writes one figure; --out DIR/\n"
      "writes every head, the average and the grid, with index.json. Computes in float32.");
  add_forward_options(cmd, *a);
  cmd->add_option("--stage", a->stage, "Trace stage to export (default attn_weights)");
  cmd->add_option("--batch-index", a->batch_index, "Batch item (default 0)");
  cmd->add_option("--head", a->head, "Head index, all (a grid with the average) or avg (default 0)");
  cmd->add_option("--format", a->format, "png, svg or csv (default: from --out's extension, else png)")
      ->check(CLI::IsMember({"png", "svg", "csv"}));
  cmd->add_option("--scale", a->scale, "Pixels per cell (default: automatic, 48 at teaching sizes)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--colormap", a->colormap, "viridis, magma, cividis or diverging (default by stage)")
      ->check(CLI::IsMember({"viridis", "magma", "cividis", "diverging"}));
  cmd->add_flag("--transparent", a->transparent, "Transparent background instead of white");
  cmd->add_flag("--values", a->values, "Print values in cells large enough for them");
  cmd->add_option("--font", a->font, "TrueType font for the text (default: the bundled DejaVu Sans)");
  cmd->add_option("--out", a->out, "Output file, or a folder (existing, or ending in /) for a batch export")
      ->required();
  return [a]() -> int {
    check_forward_args(*a);
    return run(*a);
  };
}

}  // namespace mha::cli
