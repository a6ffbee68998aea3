// One panel a file. Each draws into the current ImGui window region and edits state.scenario
// through state.edited(...). None touches GL: textures come through Textures.
#pragma once

#include "app_state.hpp"
#include "textures.hpp"

namespace mha::app {

void draw_controls(AppState& state);                    // left column: sizes, sentence, seed, options
void draw_pipeline(AppState& state, Textures& tex);     // every stage as a box; click to see it
void draw_reshape(AppState& state, Textures& tex);      // view / transpose / back, common mistakes
void draw_heads(AppState& state, Textures& tex);        // per-head heatmaps of any stage + average
void draw_mask_editor(AppState& state, Textures& tex);  // presets, click/drag, scope, convention
void draw_inspector(AppState& state);                   // right column: one weight, term by term
void draw_compare(AppState& state, Textures& tex);      // difference of two heads / before-after
void draw_complexity(AppState& state);                  // FLOPs and memory per stage, growth with L

}  // namespace mha::app
