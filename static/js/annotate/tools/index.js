// The tools: select/edit, box, polygon, keypoints, oriented box, smart polygon and SAM points.

import { KeypointsTool } from "./keypoints.js";
import { PolygonTool } from "./polygon.js";
import { BoxTool, ObbTool, SmartTool } from "./rect.js";
import { SamTool } from "./sam.js";
import { SelectTool } from "./select.js";

export { BoxTool, KeypointsTool, ObbTool, PolygonTool, SamTool, SelectTool, SmartTool };

/** The drawing tool for a dataset's task. */
export const DRAW_TOOLS = { box: BoxTool, polygon: PolygonTool, keypoints: KeypointsTool, obb: ObbTool };
