// `mha export`: one forward (inputs as `mha compute` takes them, a model's layer, or attention weights
// computed elsewhere), then a stage's heatmap as PNG, SVG, PDF or CSV — one head, the head average, or all
// heads as a grid; or, given a folder, every head and the average as separate files plus the grid,
// listed in index.json. --figure reshape and --figure rope draw the Reshape view's and the RoPE
// figure instead.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "commands.hpp"
#include "data_dir.hpp"
#include "errors.hpp"
#include "io/file_io.hpp"
#include "io/npy.hpp"
#include "model/language_model.hpp"
#include "problem.hpp"
#include "progress.hpp"
#include "reshape_export.hpp"
#include "rope_export.hpp"
#include "stage_export.hpp"

namespace fs = std::filesystem;

namespace mha::cli {

namespace {

struct ExportArgs : ForwardArgs {
  std::string stage = "attn_weights", head = "0", format, colormap, out, font;
  int batch_index = 0, scale = 0;
  bool transparent = false, values = false, quiet = false;
  // The colour range: the Heads view's automatic one, with either end fixed by --vmin / --vmax
  // (texts until checked: a bad number is refused with its option's name).
  std::string vmin_text, vmax_text;
  std::optional<float> vmin, vmax;
  bool row_scale = false;          // weights: each row coloured to its own max, as the Heads view can
  std::string tokens, key_tokens;  // labels; default: the scenario's sentence, else indices
  // A difference map: this head minus another head, or minus the same head from another backend or
  // another scenario file.
  std::string minus_head, minus_backend, minus_scenario;
  // Or reshape: q -> view -> transpose, columns by head; or rope: one head's scores without and with
  // the rotation and their mean by distance (--stage scores_without_rope, the Heads view's choice,
  // picks it too).
  std::string figure = "heatmap";
  ModelArgs model;             // --model: a model layer's attention instead
  std::string attention_file;  // --attention: a .npy of attention weights computed elsewhere
};

// Whitespace-separated labels; `count` of them, or a ConfigError naming the option.
std::vector<std::string> token_list(const std::string& text, std::int64_t count, const char* option,
                                    const char* axis) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string t; in >> t;) out.push_back(t);
  if (std::int64_t(out.size()) != count)
    throw ConfigError(option, std::string(option) + " has " + std::to_string(out.size()) +
                                  " tokens but the " + axis + " has " + std::to_string(count));
  return out;
}

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

// --layer for an --attention file: absent, or one layer's index.
std::optional<std::int64_t> attention_layer(const std::string& text) {
  if (text.empty()) return std::nullopt;
  if (text == "all") throw ConfigError("--layer", "mha export draws one layer at a time: give --layer I");
  try {
    std::size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError("--layer", "--layer " + text + ": expected a layer number");
}

// --vmin / --vmax: a finite number, or a ConfigError naming the option. `end`: "bottom" or "top".
std::optional<float> range_end(const std::string& text, const char* option, const char* end) {
  if (text.empty()) return std::nullopt;
  float v = 0;
  try {
    std::size_t used = 0;
    v = std::stof(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
  } catch (const std::exception&) {
    throw ConfigError(option, std::string(option) + " " + text + ": expected a number, the " + end +
                                  " of the colour range");
  }
  if (!std::isfinite(v))
    throw ConfigError(option, std::string(option) + " " + text + ": expected a finite number, the " + end +
                                  " of the colour range");
  return v;
}

// The colour options, checked before the forward (a bad value costs nothing).
void check_colour_options(ExportArgs& a) {
  a.vmin = range_end(a.vmin_text, "--vmin", "bottom");
  a.vmax = range_end(a.vmax_text, "--vmax", "top");
  if (a.vmin && a.vmax && !(*a.vmin < *a.vmax))
    throw ConfigError("--vmin", "--vmin " + a.vmin_text + " is not below --vmax " + a.vmax_text +
                                    ": the colour range runs from --vmin up to --vmax");
  if (a.row_scale && (a.vmin || a.vmax))
    throw ConfigError("--row-scale",
                      "--row-scale colours each row from 0 to its own max: leave out "
                      "--vmin and --vmax, or --row-scale");
  if (a.row_scale && a.stage != "attn_weights" && a.stage != "attn_weights_avg")
    throw ConfigError("--row-scale",
                      "--row-scale colours the weights' rows; --stage " + a.stage + " is not attn_weights");
  if ((a.vmin || a.vmax || a.row_scale) && a.figure == "reshape")
    throw ConfigError(a.row_scale ? "--row-scale"
                      : a.vmin    ? "--vmin"
                                  : "--vmax",
                      "--figure reshape colours q by head: --vmin, --vmax and --row-scale are for heatmaps");
  if ((a.vmin || a.vmax || a.row_scale) && a.figure == "rope")
    throw ConfigError(a.row_scale ? "--row-scale"
                      : a.vmin    ? "--vmin"
                                  : "--vmax",
                      "--figure rope colours both maps on the Heads view's range, symmetric about 0: "
                      "--vmin, --vmax and --row-scale are for heatmaps");
}

// --vmin / --vmax over the figure's automatic range: each one given replaces its end.
void fix_range(exporter::ExportSpec& s, const ExportArgs& a) {
  if (!a.vmin && !a.vmax) return;
  const float lo = a.vmin.value_or(s.vmin), hi = a.vmax.value_or(s.vmax);
  if (!(lo < hi)) {  // one end given, on the wrong side of the other, automatic end
    char other[32];
    std::snprintf(other, sizeof other, "%g", double(a.vmin ? s.vmax : s.vmin));
    throw ConfigError(
        a.vmin ? "--vmin" : "--vmax",
        a.vmin ? "--vmin " + a.vmin_text + " is not below the automatic top of the colour range, " + other +
                     ": give --vmax too"
               : "--vmax " + a.vmax_text + " is not above the automatic bottom of the colour range, " +
                     other + ": give --vmin too");
  }
  s.vmin = lo;
  s.vmax = hi;
}

// The format: --format when given, else the one --out's extension names (png, svg, pdf, csv); an
// extension that names none is refused rather than guessed. A folder's files are PNG by default.
std::string figure_format(const ExportArgs& a, bool folder) {
  if (!a.format.empty()) return a.format;
  if (folder) return "png";
  const std::string f = exporter::format_from_extension(a.out);
  if (!f.empty()) return f;
  std::string names;
  for (const std::string& n : exporter::figure_format_names()) names += (names.empty() ? "" : ", ") + n;
  throw ConfigError("--out", "--out " + a.out + ": the extension names no figure format; formats: " + names +
                                 " (end the name with one, or give --format)");
}

int run(const ExportArgs& a) {
  // A folder: an existing directory or a path ending in '/'.
  if (a.out.empty()) throw FileError("--out", "--out is empty: give a file or a folder");
  const bool folder = fs::is_directory(a.out) || a.out.back() == '/';
  const std::string format = figure_format(a, folder);  // before the forward: a bad name costs nothing
  platform::ProgressLine progress("mha export", a.quiet);
  Problem<float> p;
  ForwardResult<float> r;
  std::string title_prefix;  // "layer 3  " for a model's layer
  if (!a.attention_file.empty()) {
    if (!a.model.model_dir.empty() || !a.inputs_dir.empty() || a.torch_seed || !a.scenario_file.empty() ||
        a.num_heads)
      throw ConfigError("--attention",
                        "--attention brings the weights already computed: leave out --model, "
                        "--inputs, --torch-seed, --scenario and the size options");
    if (!a.model.text.empty() || !a.model.token_ids.empty())
      throw ConfigError("--attention",
                        "--text and --token-ids go with --model; label --attention with --tokens");
    if (!a.minus_backend.empty() || !a.minus_scenario.empty() || a.figure != "heatmap")
      throw ConfigError("--attention",
                        "--attention holds the weights alone: draw a head, all heads, or a "
                        "difference between heads (--minus-head)");
    exporter::AttentionMap m =
        exporter::attention_map(read_npy(a.attention_file), attention_layer(a.model.layer), a.attention_file);
    for (const std::string& w : m.warnings) std::printf("warning: %s\n", w.c_str());
    r = std::move(m.result);
    p.source = a.attention_file;
    if (m.layers) title_prefix = "layer " + std::to_string(m.layer) + "  ";
  } else if (!a.model.model_dir.empty()) {
    check_model_alone(a);
    if (!a.minus_backend.empty() || !a.minus_scenario.empty())
      throw ConfigError("--model", "with --model, a difference map is between heads: use --minus-head");
    if (a.model.layer == "all")
      throw ConfigError("--layer", "mha export draws one layer at a time: give --layer I");
    ModelInput in = load_model_input(a.model, "0",
                                     [&](double f) { progress.fraction(f, "loading " + a.model.model_dir); });
    const std::int64_t layer = in.layers[0];
    progress.waiting("forward");
    r = std::move(in.loaded.model->forward(in.ids)->attn[std::size_t(layer)]);
    p.query_tokens = in.tokens;
    p.key_tokens = in.tokens;
    p.source = a.model.model_dir;
    title_prefix = "layer " + std::to_string(layer) + "  ";
  } else {
    if (!a.model.text.empty() || !a.model.token_ids.empty() || !a.model.layer.empty())
      throw ConfigError("--model",
                        "--text, --token-ids and --layer go with --model DIR (--layer also with "
                        "--attention FILE)");
    p = build_problem<float>(a);
    progress.waiting("forward");
    r = forward(p.config, p.weights, p.inputs, p.options);
  }
  progress.clear();

  exporter::StageSlice slice;
  slice.stage = a.stage;
  slice.batch_index = a.batch_index;
  slice.head = parse_head(a.head);
  slice.query_labels = p.query_tokens;
  slice.key_labels = p.key_tokens;
  if (!a.tokens.empty()) {
    slice.query_labels = token_list(a.tokens, r.dims.L, "--tokens", "query length L");
    // Self-attention: the same tokens label the keys, unless --key-tokens says otherwise.
    if (a.key_tokens.empty() && r.dims.S == r.dims.L) slice.key_labels = slice.query_labels;
  }
  if (!a.key_tokens.empty())
    slice.key_labels = token_list(a.key_tokens, r.dims.S, "--key-tokens", "key length S");
  // add_zero_attn / bias_k add key columns no sentence names.
  for (std::int64_t j = std::int64_t(slice.key_labels.size());
       !slice.key_labels.empty() && j < r.dims.S_total; ++j)
    slice.key_labels.push_back(j < r.dims.S ? std::to_string(j) : "+" + std::to_string(j - r.dims.S));
  if (a.colormap == "viridis") slice.colormap = render::Colormap::viridis;
  if (a.colormap == "magma") slice.colormap = render::Colormap::magma;
  if (a.colormap == "cividis") slice.colormap = render::Colormap::cividis;
  if (a.colormap == "diverging") slice.colormap = render::Colormap::diverging;
  slice.row_scale = a.row_scale;
  auto style = [&](exporter::StageFigure& fig) {
    fig.spec.title = title_prefix + fig.spec.title;
    fig.spec.cell_px = a.scale;
    fig.spec.transparent = a.transparent;
    fig.spec.show_values = a.values;
    fig.spec.font_path = a.font;
    fix_range(fig.spec, a);
  };

  if (a.figure == "rope") {
    if (!a.minus_head.empty() || !a.minus_backend.empty() || !a.minus_scenario.empty())
      throw ConfigError("--figure",
                        "--figure rope draws one head without and with RoPE; it has no difference map");
    if (folder) throw ConfigError("--out", "the RoPE figure is one image: give --out FILE, not a folder");
    if (a.batch_index != 0)
      throw ConfigError("--batch-index", "--figure rope draws one sequence: --batch-index 0");
    exporter::RopeSpec rs;
    rs.head = parse_head(a.head);
    if (rs.head < 0)
      throw ConfigError("--head", "--figure rope draws one head: give --head I, not " + a.head);
    rs.query_labels = slice.query_labels;
    rs.title_prefix = title_prefix;
    rs.cell_px = a.scale;
    rs.transparent = a.transparent;
    rs.font_path = a.font;
    const exporter::RopeFigure fig = exporter::rope_figure(r, rs);
    exporter::write_figure(format, fig.drawing, a.out);
    std::printf("wrote %s (%s, RoPE figure %d×%d, head %d, colour range %g to %g)\n", a.out.c_str(),
                format.c_str(), fig.drawing.width, fig.drawing.height, rs.head, double(fig.vmin),
                double(fig.vmax));
    return 0;
  }
  if (a.figure == "reshape") {
    if (!a.minus_head.empty() || !a.minus_backend.empty() || !a.minus_scenario.empty())
      throw ConfigError("--figure",
                        "--figure reshape draws q's view and transpose; it has no difference map");
    if (folder) throw ConfigError("--out", "the reshape figure is one image: give --out FILE, not a folder");
    exporter::ReshapeSpec rs;
    rs.batch_index = a.batch_index;
    rs.tokens = slice.query_labels;
    rs.cell_px = a.scale;
    rs.transparent = a.transparent;
    rs.font_path = a.font;
    const exporter::ReshapeFigure fig = exporter::reshape_figure(r, rs);
    exporter::write_figure(format, fig.drawing, a.out);
    std::printf("wrote %s (%s, reshape figure %d×%d)\n", a.out.c_str(), format.c_str(), fig.drawing.width,
                fig.drawing.height);
    return 0;
  }
  const int minus_options = !a.minus_head.empty() + !a.minus_backend.empty() + !a.minus_scenario.empty();
  if (minus_options > 1)
    throw ConfigError("--minus-head", "give one of --minus-head, --minus-backend, --minus-scenario");
  if (minus_options) {
    if (folder) throw ConfigError("--out", "a difference map is one figure: give --out FILE, not a folder");
    const std::string head_name = slice.head == exporter::kHeadAverage ? "head average" : "head " + a.head;
    exporter::StageSlice other = slice;
    std::string a_name = head_name, b_name;
    ForwardResult<float> rb;
    if (!a.minus_head.empty()) {
      other.head = parse_head(a.minus_head);
      b_name = other.head == exporter::kHeadAverage ? "head average" : "head " + a.minus_head;
    } else if (!a.minus_backend.empty()) {
      Problem<float> q = build_problem<float>(a);
      q.options.backend = a.minus_backend == "reference" ? Backend::reference : Backend::eigen;
      rb = forward(q.config, q.weights, q.inputs, q.options);
      a_name = head_name + " (" + backend_name(r.backend) + ")";
      b_name = std::string(backend_name(rb.backend)) + " backend";
    } else {
      ExportArgs b = a;
      b.scenario_file = a.minus_scenario;
      b.inputs_dir.clear();
      b.torch_seed.reset();
      b.num_heads = 0;
      const Problem<float> q = build_problem<float>(b);
      rb = forward(q.config, q.weights, q.inputs, q.options);
      a_name = head_name + " (" +
               (a.scenario_file.empty() ? p.source : fs::path(a.scenario_file).filename().string()) + ")";
      b_name = fs::path(a.minus_scenario).filename().string();
    }
    const ForwardResult<float>& rb_ref = a.minus_head.empty() ? rb : r;
    exporter::StageFigure fig = exporter::difference_figure(r, slice, a_name, rb_ref, other, b_name);
    style(fig);
    exporter::write_figure(format, fig.spec, a.out);
    std::printf("wrote %s (%s): %s\n", a.out.c_str(), format.c_str(), fig.spec.title.c_str());
    return 0;
  }
  if (!folder) {
    exporter::StageFigure fig = exporter::stage_figure(r, slice);
    style(fig);
    exporter::write_figure(format, fig.spec, a.out);
    std::printf("wrote %s (%s, %zu panel%s, colour range %g to %g%s)\n", a.out.c_str(), format.c_str(),
                fig.spec.panels.size(), fig.spec.panels.size() == 1 ? "" : "s", double(fig.spec.vmin),
                double(fig.spec.vmax), fig.spec.row_scale ? " of each row's max" : "");
    return 0;
  }

  // Batch export: each head, the average, and (for images) the grid of them all, written into a
  // staging folder that then replaces --out whole: a failure (a full disk) leaves an earlier
  // export's folder as it was, and a folder of the user's (no index.json) is refused, not replaced.
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
  write_folder_atomic(a.out, {"index.json"}, [&](const std::string& staging) {
    nlohmann::json files = nlohmann::json::array();
    for (std::size_t k = 0; k < jobs.size(); ++k) {
      progress.step(std::int64_t(k), std::int64_t(jobs.size()), jobs[k].first);
      slice.head = jobs[k].second;
      exporter::StageFigure fig = exporter::stage_figure(r, slice);
      style(fig);
      exporter::write_figure(format, fig.spec, (fs::path(staging) / jobs[k].first).string());
      const int h = jobs[k].second;
      files.push_back(
          {{"file", jobs[k].first},
           {"head", h >= 0 ? nlohmann::json(h) : nlohmann::json(h == exporter::kAllHeads ? "all" : "avg")},
           {"title", fig.spec.title}});
    }
    progress.step(std::int64_t(jobs.size()), std::int64_t(jobs.size()));
    const std::string index =
        nlohmann::json{
            {"stage", a.stage}, {"batch_index", a.batch_index}, {"format", format}, {"files", files}}
            .dump(2) +
        "\n";
    exporter::write_file((fs::path(staging) / "index.json").string(), index.data(), index.size());
  });
  progress.clear();
  std::printf("wrote %zu files and index.json to %s\n", jobs.size(), a.out.c_str());
  return 0;
}

}  // namespace

std::function<int()> add_export(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "A stage's heatmap as a PNG, SVG or PDF figure (title, token labels, colorbar, masked cells, NaN\n"
      "rows) or a CSV slice, from the same inputs as `mha compute`. --out FILE writes one figure in the\n"
      "format its extension names (or --format); --out DIR/\n"
      "writes every head, the average and the grid, with index.json. Computes in float32.");
  add_forward_options(cmd, *a);
  add_model_options(cmd, a->model, "With --model, or a 5-D --attention: the layer to draw (default 0)");
  cmd->add_option("--attention", a->attention_file,
                  "A .npy of attention weights computed elsewhere (e.g. a Hugging Face model's "
                  "output_attentions, stacked): (T, T), (H, T, T), (N, H, T, T) or (layers, N, H, T, T)");
  cmd->add_option("--stage", a->stage,
                  "Trace stage to export (default attn_weights); scores_without_rope, the Heads view's "
                  "choice for a model with RoPE, is --figure rope");
  cmd->add_option("--batch-index", a->batch_index, "Batch item (default 0)");
  cmd->add_option("--head", a->head, "Head index, all (a grid with the average) or avg (default 0)");
  cmd->add_option("--format", a->format,
                  "png, svg, pdf or csv; wins over --out's extension (default: from the extension; PNG "
                  "for a folder)")
      ->check(CLI::IsMember(exporter::figure_format_names()));
  cmd->add_option("--scale", a->scale, "Pixels per cell (default: automatic, 48 at teaching sizes)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--colormap", a->colormap,
                  "viridis, magma, cividis or diverging (default: viridis for weights, diverging otherwise; "
                  "scores are always diverging and weights never, as in the app)")
      ->check(CLI::IsMember({"viridis", "magma", "cividis", "diverging"}));
  cmd->add_option("--vmin", a->vmin_text,
                  "Bottom of the colour range (default: the app's automatic range: weights from 0 to their "
                  "largest, scores symmetric about 0, over every head of the batch item)")
      ->type_name("NUMBER");
  cmd->add_option("--vmax", a->vmax_text, "Top of the colour range (default: automatic, as --vmin)")
      ->type_name("NUMBER");
  cmd->add_flag("--row-scale", a->row_scale,
                "Weights: colour each row from 0 to its own largest weight, as the app's \"colour each "
                "row to its max\"");
  cmd->add_flag("--transparent", a->transparent, "Transparent background instead of white");
  cmd->add_flag("--values", a->values, "Print values in cells large enough for them");
  cmd->add_option("--tokens", a->tokens,
                  "Query token labels, space-separated, L of them (default: the scenario's sentence, else "
                  "indices); self-attention labels the keys with them too");
  cmd->add_option("--key-tokens", a->key_tokens, "Key token labels, S of them (cross-attention)");
  cmd->add_option("--minus-head", a->minus_head,
                  "A difference map: --head minus this head (an index or avg), same stage and batch item");
  cmd->add_option("--minus-backend", a->minus_backend,
                  "A difference map: the same head computed on this backend subtracted (reference or cpu)")
      ->check(CLI::IsMember({"reference", "cpu"}));
  cmd->add_option("--minus-scenario", a->minus_scenario,
                  "A difference map: the same head of this scenario file's forward subtracted");
  cmd->add_option("--figure", a->figure,
                  "heatmap (default: --stage as a heatmap), reshape (q of --batch-index: (N, L, E) -> "
                  "view (N, L, H, d_k) -> transpose (N, H, L, d_k), columns coloured by head) or rope (a "
                  "model with RoPE, one --head: its scores before and after the rotation side by side, "
                  "and their mean by distance i - j)")
      ->check(CLI::IsMember({"heatmap", "reshape", "rope"}));
  CLI::Option* font = cmd->add_option(
      "--font", a->font, "TrueType or OpenType font for the text (default: the bundled DejaVu Sans)");
  cmd->add_option("--out", a->out,
                  "Output file, or a folder (existing, or ending in /) for a batch export, replaced whole "
                  "(an earlier export's, or a new or empty folder)")
      ->required();
  cmd->add_flag("--quiet", a->quiet, "No progress line on stderr (it is shown only on a terminal)");
  return [a, font]() -> int {
    if (a->model.model_dir.empty() && a->attention_file.empty()) check_forward_args(*a);
    if (a->stage == exporter::kRopeStage) {  // no trace stage: the figure that draws them
      if (a->figure == "reshape")
        throw ConfigError("--stage",
                          "--stage scores_without_rope is the RoPE figure: leave out --figure reshape");
      a->figure = "rope";
    }
    check_colour_options(*a);
    if (font->count() && a->font.empty()) throw FileError("--font", "--font is empty: give a font file");
    if (a->font.empty()) {  // the shipped font, else fontconfig's match, said on stderr
      const platform::FontLookup found = platform::default_font();
      if (!found.note.empty()) std::fprintf(stderr, "mha: %s\n", found.note.c_str());
      a->font = found.path;
    }
    // Never over an input, whatever the spelling: a scenario, weights, a mask, the font, and each
    // file of an --inputs folder (a figure written beside them is fine).
    std::vector<std::string> inputs = {a->inputs_dir,      a->weights_file,   a->scenario_file,
                                       a->model.model_dir, a->attention_file, a->font,
                                       a->minus_scenario};
    std::error_code ec;
    if (!a->inputs_dir.empty())
      for (const fs::directory_entry& e : fs::directory_iterator(a->inputs_dir, ec))
        if (e.is_regular_file(ec)) inputs.push_back(e.path().string());
    refuse_output_over_inputs(a->out, inputs);
    return run(*a);
  };
}

}  // namespace mha::cli
