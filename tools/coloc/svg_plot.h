// tools/coloc/svg_plot.h — `coloc report --svg`: a job's memory over time as an SVG picture,
// one panel per device: bytes in use (a filled step curve), the job's limit and the device's
// capacity as labelled lines, waiting periods as shaded bands, refused allocations (OOM events)
// as red markers with their reason, and the peak marked; axes with units and a legend. Under the
// panels, on the same time axis, a lane per timesliced device the job held (a bar per turn);
// none when it held none.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace coloc::cli {

/// The SVG document (UTF-8 text) for a report in the daemon's JSON shape.
std::string render_svg(const nlohmann::json& report);

/// Escapes text for XML content and attribute values.
std::string xml_escape(const std::string& s);

/// "Nice" axis ticks covering [0, max]: steps of 1, 2, 2.5 or 5 times a power of ten, about
/// `target` of them. Returns the step (> 0).
double nice_step(double max, int target);

}  // namespace coloc::cli
