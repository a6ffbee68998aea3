// The app draws the studio core's state and sends it actions; inside namespace mha::app the core's
// types (AppState, Scenario, Result, …) and the colormaps are used by their plain names.
#pragma once

namespace mha::studio {}
namespace mha::render {}
namespace mha::app {
using namespace mha::studio;
using namespace mha::render;
}  // namespace mha::app
