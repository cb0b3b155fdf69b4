// Terminal colours (ANSI SGR codes) of a log line as segments of text with class names, so a
// page can draw them as <span class="..."> whose text is set with textContent, never as HTML.
// Other control sequences (cursor moves, titles) are dropped.
(function () {
  "use strict";

  // CSI ... final byte, OSC ... BEL/ST, or a two-byte escape.
  var ESCAPE = /\x1b(?:\[([0-?]*)[ -\/]*([@-~])|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])/g;

  function fresh() {
    return { fg: null, bg: null, bold: false, dim: false, italic: false, underline: false };
  }

  function classes(s) {
    var out = [];
    if (s.fg !== null) out.push("ansi-fg-" + s.fg);
    if (s.bg !== null) out.push("ansi-bg-" + s.bg);
    if (s.bold) out.push("ansi-b");
    if (s.dim) out.push("ansi-d");
    if (s.italic) out.push("ansi-i");
    if (s.underline) out.push("ansi-u");
    return out.join(" ");
  }

  // 256-colour and RGB codes: the 16 basic colours map to classes; others keep the default.
  function extended(codes, i, s, key) {
    if (codes[i + 1] === 5) {
      var n = codes[i + 2];
      s[key] = n >= 0 && n < 16 ? n : null;
      return i + 2;
    }
    if (codes[i + 1] === 2) {
      s[key] = null;
      return i + 4;
    }
    return i;
  }

  function apply(params, s) {
    var codes = params === "" ? [0] : params.split(";").map(function (p) { return p === "" ? 0 : parseInt(p, 10); });
    for (var i = 0; i < codes.length; i++) {
      var c = codes[i];
      if (c === 0) Object.assign(s, fresh());
      else if (c === 1) s.bold = true;
      else if (c === 2) s.dim = true;
      else if (c === 3) s.italic = true;
      else if (c === 4) s.underline = true;
      else if (c === 22) { s.bold = false; s.dim = false; }
      else if (c === 23) s.italic = false;
      else if (c === 24) s.underline = false;
      else if (c >= 30 && c <= 37) s.fg = c - 30;
      else if (c === 38) i = extended(codes, i, s, "fg");
      else if (c === 39) s.fg = null;
      else if (c >= 40 && c <= 47) s.bg = c - 40;
      else if (c === 48) i = extended(codes, i, s, "bg");
      else if (c === 49) s.bg = null;
      else if (c >= 90 && c <= 97) s.fg = c - 90 + 8;
      else if (c >= 100 && c <= 107) s.bg = c - 100 + 8;
    }
  }

  // parse("\x1b[34m\x1b[1mtrain:\x1b[0m ok") ->
  //   {plain: "train: ok", segments: [{text: "train:", cls: "ansi-fg-4 ansi-b"}, {text: " ok", cls: ""}]}
  function parse(line) {
    var state = fresh();
    var segments = [];
    var plain = "";
    var last = 0;
    var match;
    function push(text) {
      if (!text) return;
      var cls = classes(state);
      var prev = segments[segments.length - 1];
      if (prev && prev.cls === cls) prev.text += text;
      else segments.push({ text: text, cls: cls });
      plain += text;
    }
    ESCAPE.lastIndex = 0;
    while ((match = ESCAPE.exec(line)) !== null) {
      push(line.slice(last, match.index));
      if (match[2] === "m") apply(match[1], state);
      last = ESCAPE.lastIndex;
    }
    push(line.slice(last));
    return { plain: plain, segments: segments };
  }

  window.KestrelAnsi = { parse: parse };
})();
