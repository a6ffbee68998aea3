// Tests change the app state the way the panels do: through AppState::apply with an action.
#pragma once

#include <string>
#include <utility>

#include "app_state.hpp"

namespace mha::test {

// One edit named `what`: `change` runs on the live scenario through AppState::apply.
template <class F>
bool edit(studio::AppState& state, const std::string& what, F change) {
  studio::Action a;
  a.what = what;
  a.change = std::move(change);
  return state.apply(a);
}

}  // namespace mha::test
