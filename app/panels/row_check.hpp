// The Heads view's per-row check of attention weights (heads.cpp): the engine's (weights_check.hpp),
// which a forward with a weights overview also runs on each row it computes.
#pragma once

#include "weights_check.hpp"

namespace mha::app::heads {

using weights_check::blocked;
using weights_check::check_row;
using weights_check::Plane;
using weights_check::RowPart;

}  // namespace mha::app::heads
