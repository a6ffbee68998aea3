// The views (the centre tabs) as one table: their ids, the names the tab bar, `--tab`, a script's
// `tab` and a scenario file use, what each reads, and what the arrow keys do in each. The tab bar,
// the number keys, the View menu, the `?` overlay and every parser of a view's name are made from it.
// GUI-free: the app adds each view's draw function by id (app/ui.cpp), the compiler checking that
// every id has one.
#pragma once

#include <string>
#include <vector>

namespace mha::studio {

// A view's id. The numbers are saved in older scenario files (as "tab": 3): a new view takes the next.
enum class ViewTab {
  pipeline,
  reshape,
  heads,
  mask,
  compare,
  complexity,
  large_l,
  attention_file,
  overview,
  token_lines,
  check,
  sqrt_dk,
};

// What a view draws from.
enum class ViewReads {
  result,        // the scenario's forward (says so while there is none yet)
  every_weight,  // the forward's every attention weight: the worker keeps them at every size
  own,           // data of its own: the Large L view computes its own rows, the Attention file view a file
};

struct ViewInfo {
  ViewTab id;
  const char* name;       // the tab bar's: "Token lines"
  const char* file_name;  // in scenario files: "token_lines"
  ViewReads reads;
  const char* left_right;  // what Left / Right do in this view (for `?`); nullptr: nothing
  const char* up_down;     // what Up / Down do; nullptr: nothing
};

// Every view, in the tab bar's order (the number keys 1-9, 0 follow it).
const std::vector<ViewInfo>& views();
const ViewInfo& view_info(ViewTab id);
// A view by its tab name or file name, case, spaces, '-' and '_' aside ("token lines", "Token-Lines",
// "token_lines"); nullptr when there is none.
const ViewInfo* find_view(const std::string& name);
// "Pipeline, Reshape, …": the names, for errors.
std::string view_names();
const char* to_string(ViewTab t);  // the file name

}  // namespace mha::studio
