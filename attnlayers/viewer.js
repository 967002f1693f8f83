/* attnlayers attention viewer: plain JavaScript, no library, no network (inlined by attnlayers/viewer.py).
 *
 * The page holds a JSON description (#attn-meta) and one base64 block per map set: uint16 weights
 * q = round(65535 (w - lo) / (hi - lo)) as a plane of high bytes then a plane of low bytes, deflated. Views: head
 * (bertviz's), model (layers x heads), matrix (one alignment matrix), image (maps over an image's grid).
 */
(function () {
  "use strict";

  var ROW = 18;                  // head view: px per token
  var HEAD_VIEW_WIDTH = 260;     // head view: px between the token columns
  var MAX_LINES = 3000;          // head view: most lines drawn when no token is hovered
  var viewer = (window.attnViewer = { readyAt: null, error: null, sets: [], images: [], app: null });

  // ---- helpers ---------------------------------------------------------------------------------------------

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === "className") node.className = attrs[k];
        else node.setAttribute(k, attrs[k]);
      });
    }
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function fmt(w) { return w.toFixed(3); }

  function headColor(h, n, alpha) {
    var hue = Math.round((h * 360) / Math.max(n, 1) + 210) % 360;
    return "hsla(" + hue + ",72%,45%," + (alpha === undefined ? 1 : alpha) + ")";
  }

  // viridis, 10 stops, as a 256-entry lookup table
  var STOPS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137],
               [53, 183, 121], [110, 206, 88], [181, 222, 43], [253, 231, 37]];
  var LUT = new Uint8ClampedArray(256 * 3);
  (function () {
    for (var i = 0; i < 256; i++) {
      var x = (i / 255) * (STOPS.length - 1), j = Math.min(STOPS.length - 2, Math.floor(x)), f = x - j;
      for (var c = 0; c < 3; c++) LUT[i * 3 + c] = STOPS[j][c] + f * (STOPS[j + 1][c] - STOPS[j][c]);
    }
  })();

  function range(n) { var out = []; for (var i = 0; i < n; i++) out.push(i); return out; }

  function maxOf(values) {
    var m = 0;
    for (var i = 0; i < values.length; i++) if (values[i] > m) m = values[i];
    return m;
  }

  /* Draws a (rows, cols) map into `canvas` at one pixel per cell, viridis scaled by `scale` (1 / max). */
  function paintMap(canvas, map, rows, cols, scale) {
    canvas.width = cols;
    canvas.height = rows;
    var ctx = canvas.getContext("2d"), image = ctx.createImageData(cols, rows), px = image.data;
    for (var i = 0, n = rows * cols; i < n; i++) {
      var k = Math.max(0, Math.min(255, Math.round(map[i] * scale * 255))) * 3;
      px[i * 4] = LUT[k]; px[i * 4 + 1] = LUT[k + 1]; px[i * 4 + 2] = LUT[k + 2]; px[i * 4 + 3] = 255;
    }
    ctx.putImageData(image, 0, 0);
  }

  function selectBox(id, label, options, value, onChange) {
    var wrap = el("label", null, label + " ");
    var box = el("select", { id: id });
    options.forEach(function (o) { box.appendChild(el("option", { value: String(o.value) }, o.label)); });
    box.value = String(value);
    box.addEventListener("change", function () { onChange(Number(box.value)); });
    wrap.appendChild(box);
    return wrap;
  }

  /* The controls row of a view, with a selector of its sets (when there are several). */
  function setControls(id, label, sets, onChange) {
    var controls = el("div", { className: "controls" });
    if (sets.length > 1) {
      controls.appendChild(selectBox(id, label, sets.map(function (s, i) { return { value: i, label: s.name }; }),
                                     0, onChange));
    }
    return controls;
  }

  function layerOptions(set) { return set.meta.layer_names.map(function (n, i) { return { value: i, label: n }; }); }

  function headOptions(set) {
    var options = set.N > 1 ? [{ value: -1, label: "mean of heads" }] : [];
    return options.concat(set.meta.head_names.map(function (n, i) { return { value: i, label: n }; }));
  }

  // ---- data ------------------------------------------------------------------------------------------------

  function base64Bytes(text) {
    text = text.trim();
    if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(text);
    var bin = atob(text), n = bin.length, out = new Uint8Array(n);
    for (var i = 0; i < n; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  function inflate(bytes) {
    if (typeof DecompressionStream !== "function") {
      return Promise.reject(new Error("this browser has no DecompressionStream (Chrome 80+, Firefox 113+ and " +
                                      "Safari 16.4+ have it)"));
    }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).arrayBuffer().then(function (buffer) { return new Uint8Array(buffer); });
  }

  function decode(meta, levels) {
    var node = document.getElementById(meta.data);
    if (!node) return Promise.reject(new Error("missing data block " + meta.data));
    return inflate(base64Bytes(node.textContent)).then(function (planes) {
      var n = planes.length >> 1, out = new Float32Array(n), lo = meta.lo, scale = (meta.hi - meta.lo) / levels;
      for (var i = 0; i < n; i++) out[i] = lo + (planes[i] * 256 + planes[n + i]) * scale;
      return out;
    });
  }

  /* One set of maps (L, N, T, S), row-major, as Float32Array. */
  function MapSet(meta, values, isImage) {
    this.meta = meta;
    this.name = meta.name;
    this.values = values;
    this.L = meta.layers;
    this.N = meta.heads;
    this.T = isImage ? meta.queries.length : meta.target.length;
    this.S = isImage ? meta.keys : meta.source.length;
    this.target = isImage ? meta.queries : meta.target;
    this.source = isImage ? null : meta.source;
    if (values.length !== this.L * this.N * this.T * this.S) {
      throw new Error("map set '" + meta.name + "' holds " + values.length + " values; expected " +
                      this.L * this.N * this.T * this.S);
    }
  }
  MapSet.prototype.offset = function (l, h) { return (l * this.N + h) * this.T * this.S; };
  MapSet.prototype.w = function (l, h, t, s) { return this.values[this.offset(l, h) + t * this.S + s]; };
  MapSet.prototype.mean = function (l, heads, t, s) {
    if (!heads.length) return 0;
    var sum = 0;
    for (var i = 0; i < heads.length; i++) sum += this.w(l, heads[i], t, s);
    return sum / heads.length;
  };
  /* The (T, S) map of layer l and head h, or the mean of the heads for h < 0. */
  MapSet.prototype.map = function (l, h) {
    var n = this.T * this.S;
    if (h >= 0) return this.values.subarray(this.offset(l, h), this.offset(l, h) + n);
    var out = new Float32Array(n);
    for (var k = 0; k < this.N; k++) {
      var o = this.offset(l, k);
      for (var i = 0; i < n; i++) out[i] += this.values[o + i];
    }
    for (var j = 0; j < n; j++) out[j] /= this.N;
    return out;
  };

  // ---- head view -------------------------------------------------------------------------------------------

  function HeadView(app, sets) {
    var self = this;
    this.sets = sets;
    this.set = 0;
    this.layer = 0;
    this.active = [];
    this.focus = null;
    this.root = el("section", { className: "view", id: "view-head" });
    var controls = setControls("hv-set", "Attention", sets, function (v) {
      self.set = v;
      self.layer = 0;
      self.rebuild();
    });
    this.layerWrap = el("span");
    this.headWrap = el("span", { className: "heads", id: "hv-heads" });
    controls.appendChild(this.layerWrap);
    controls.appendChild(this.headWrap);
    this.root.appendChild(controls);
    this.root.appendChild(el("p", { className: "hint" }, "Hover a token: its lines alone, and its weights beside " +
      "the tokens on the other side (the mean over the active heads). Click a head to toggle it, double-click to " +
      "keep only that head."));
    this.legend = el("div", { className: "legend", id: "hv-legend" });
    this.root.appendChild(this.legend);
    var body = el("div", { className: "hv-body" });
    this.left = el("div", { className: "hv-col left", id: "hv-queries" });
    this.canvas = el("canvas", { id: "hv-canvas" });
    this.right = el("div", { className: "hv-col right", id: "hv-keys" });
    body.appendChild(this.left);
    body.appendChild(this.canvas);
    body.appendChild(this.right);
    this.root.appendChild(body);
  }

  HeadView.prototype.activate = function () { if (!this.built) this.rebuild(); };

  HeadView.prototype.rebuild = function () {
    var self = this, s = this.sets[this.set];
    this.built = true;
    this.layer = Math.min(this.layer, s.L - 1);
    this.focus = null;
    this.layerWrap.textContent = "";
    this.layerWrap.appendChild(selectBox("hv-layer", "Layer", layerOptions(s), this.layer, function (v) {
      self.layer = v;
      self.draw();
    }));
    this.active = range(s.N).map(function () { return true; });
    this.headWrap.textContent = "";
    this.headWrap.appendChild(el("span", { className: "muted" }, "Heads "));
    this.toggles = range(s.N).map(function (h) {
      var t = el("span", { className: "head-toggle", "data-head": String(h), title: s.meta.head_names[h] },
                 String(h + 1));
      t.style.background = headColor(h, s.N);
      t.addEventListener("click", function () { self.active[h] = !self.active[h]; self.refreshHeads(); });
      t.addEventListener("dblclick", function () { self.only(h); });
      self.headWrap.appendChild(t);
      return t;
    });
    var all = el("button", { className: "small", id: "hv-all", type: "button" }, "all");
    all.addEventListener("click", function () { self.active = self.active.map(function () { return true; });
                                                self.refreshHeads(); });
    this.headWrap.appendChild(all);
    this.leftNodes = this.column(this.left, s.target, "query");
    this.rightNodes = this.column(this.right, s.source, "key");
    this.refreshHeads();
  };

  HeadView.prototype.column = function (root, tokens, side) {
    var self = this;
    root.textContent = "";
    return tokens.map(function (token, i) {
      var node = el("div", { className: "tok", "data-index": String(i), "data-side": side });
      var label = el("span", { className: "lbl" }, token), weight = el("span", { className: "w" });
      if (side === "query") { node.appendChild(weight); node.appendChild(label); }
      else { node.appendChild(label); node.appendChild(weight); }
      node.weight = weight;
      node.addEventListener("mouseenter", function () { self.setFocus({ side: side, index: i }); });
      node.addEventListener("mouseleave", function () { self.setFocus(null); });
      root.appendChild(node);
      return node;
    });
  };

  HeadView.prototype.only = function (h) {
    this.active = this.active.map(function (_, k) { return k === h; });
    this.refreshHeads();
  };

  HeadView.prototype.refreshHeads = function () {
    var self = this;
    this.toggles.forEach(function (t, h) { t.classList.toggle("off", !self.active[h]); });
    this.draw();
  };

  HeadView.prototype.heads = function () {
    var out = [];
    this.active.forEach(function (on, h) { if (on) out.push(h); });
    return out;
  };

  HeadView.prototype.setFocus = function (focus) { this.focus = focus; this.draw(); };

  HeadView.prototype.draw = function () {
    var s = this.sets[this.set], l = this.layer, f = this.focus, canvas = this.canvas;
    var dpr = window.devicePixelRatio || 1, width = HEAD_VIEW_WIDTH, height = Math.max(s.T, s.S) * ROW;
    if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(height * dpr);
      canvas.style.width = width + "px";
      canvas.style.height = height + "px";
    }
    var ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    var BUCKETS = 10, floor = f ? 0.005 : 0.02, heads = this.heads();
    var t0 = f && f.side === "query" ? f.index : 0, t1 = f && f.side === "query" ? f.index + 1 : s.T;
    var s0 = f && f.side === "key" ? f.index : 0, s1 = f && f.side === "key" ? f.index + 1 : s.S;
    this.lines = null;
    if (!f) {  // the overview: the MAX_LINES strongest lines at most (a canvas strokes ~20k long lines a second)
      var counts = new Uint32Array(101), total = 0;
      heads.forEach(function (h) {
        for (var i = s.offset(l, h), end = i + s.T * s.S; i < end; i++) {
          if (s.values[i] >= floor) { counts[Math.min(100, Math.floor(s.values[i] * 100))]++; total++; }
        }
      });
      var kept = total, bin = 0;
      while (kept > MAX_LINES && bin < 100) kept -= counts[bin++];
      floor = Math.max(floor, bin / 100);
      this.lines = { shown: kept, total: total };
    }
    heads.forEach(function (h) {
      var paths = [], base = s.offset(l, h);
      for (var t = t0; t < t1; t++) {
        var row = base + t * s.S, y0 = t * ROW + ROW / 2;
        for (var k = s0; k < s1; k++) {
          var w = s.values[row + k];
          if (w < floor) continue;
          var b = Math.min(BUCKETS - 1, Math.floor(w * BUCKETS));
          var path = paths[b] || (paths[b] = new Path2D());
          path.moveTo(0, y0);
          path.lineTo(width, k * ROW + ROW / 2);
        }
      }
      ctx.lineWidth = f ? 2 : 1.5;
      for (var i = 0; i < BUCKETS; i++) {
        if (!paths[i]) continue;
        ctx.strokeStyle = headColor(h, s.N, (i + 1) / BUCKETS);
        ctx.stroke(paths[i]);
      }
    });
    this.showWeights();
  };

  HeadView.prototype.showWeights = function () {
    var s = this.sets[this.set], l = this.layer, f = this.focus, heads = this.heads();
    var which = heads.length === 1 ? s.meta.head_names[heads[0]] : "mean of " + heads.length + " heads";
    this.leftNodes.concat(this.rightNodes).forEach(function (node) {
      node.weight.textContent = "";
      node.style.background = "";
      node.classList.remove("focus");
      node.removeAttribute("data-weight");
      node.removeAttribute("title");
    });
    this.legend.setAttribute("data-layer", String(l));
    this.legend.setAttribute("data-heads", heads.join(","));
    if (!f) {
      this.legend.removeAttribute("data-side");
      this.legend.removeAttribute("data-index");
      var lines = this.lines && this.lines.shown < this.lines.total
        ? " The " + this.lines.shown + " strongest of " + this.lines.total + " lines of weight \u2265 0.02 drawn."
        : "";
      this.legend.textContent = s.name + ", " + s.meta.layer_names[l] + ": " + heads.length + " of " + s.N +
        " heads shown." + lines + " Hover a token.";
      return;
    }
    var fromQuery = f.side === "query";
    var focusNode = (fromQuery ? this.leftNodes : this.rightNodes)[f.index];
    var nodes = fromQuery ? this.rightNodes : this.leftNodes;
    focusNode.classList.add("focus");
    this.legend.setAttribute("data-side", f.side);
    this.legend.setAttribute("data-index", String(f.index));
    this.legend.textContent = (fromQuery ? "Attention from \u201c" : "Attention to \u201c") +
      (fromQuery ? s.target : s.source)[f.index] + "\u201d (" + (fromQuery ? "query " : "key ") + f.index + "), " +
      s.meta.layer_names[l] + ", " + which + ".";
    var hue = heads.length === 1 ? heads[0] : null;
    nodes.forEach(function (node, i) {
      var t = fromQuery ? f.index : i, k = fromQuery ? i : f.index;
      if (!heads.length) return;
      var w = s.mean(l, heads, t, k), text = fmt(w);
      node.weight.textContent = text;
      node.setAttribute("data-weight", text);
      node.style.background = hue === null ? "rgba(37,99,235," + (0.55 * Math.min(1, w)) + ")"
                                           : headColor(hue, s.N, 0.55 * Math.min(1, w));
      if (heads.length > 1 && heads.length <= 16) {
        node.title = heads.map(function (h) { return s.meta.head_names[h] + ": " + fmt(s.w(l, h, t, k)); })
          .join("\n");
      }
    });
  };

  HeadView.prototype.open = function (set, layer, head) {
    if (set !== this.set || !this.built) {
      this.set = set;
      var box = document.getElementById("hv-set");
      if (box) box.value = String(set);
      this.rebuild();
    }
    this.layer = layer;
    document.getElementById("hv-layer").value = String(layer);
    this.only(head);
  };

  // ---- model view ------------------------------------------------------------------------------------------

  function ModelView(app, sets) {
    var self = this;
    this.app = app;
    this.sets = sets;
    this.set = 0;
    this.rendered = -1;
    this.root = el("section", { className: "view", id: "view-model" });
    var controls = setControls("mv-set", "Attention", sets, function (v) { self.set = v; self.render(); });
    this.root.appendChild(controls);
    this.root.appendChild(el("p", { className: "hint" }, "Every layer and head; each map is scaled to its own " +
      "maximum (rows: queries, columns: keys). Click one to open it in the head view."));
    this.grid = el("div", { id: "mv-grid" });
    this.root.appendChild(this.grid);
  }

  ModelView.prototype.activate = function () { if (this.rendered !== this.set) this.render(); };

  ModelView.prototype.render = function () {
    var self = this, s = this.sets[this.set], index = this.set;
    this.rendered = this.set;
    this.grid.textContent = "";
    var table = el("table", { className: "mv-grid" }), header = el("tr");
    header.appendChild(el("th"));
    s.meta.head_names.forEach(function (n) { header.appendChild(el("th", null, n)); });
    table.appendChild(header);
    var cell = Math.max(36, Math.min(96, Math.floor(1100 / s.N)));
    var cellW = s.S >= s.T ? cell : Math.max(12, Math.round((cell * s.S) / s.T));
    var cellH = s.T >= s.S ? cell : Math.max(12, Math.round((cell * s.T) / s.S));
    for (var l = 0; l < s.L; l++) {
      var row = el("tr");
      row.appendChild(el("th", null, s.meta.layer_names[l]));
      for (var h = 0; h < s.N; h++) {
        var td = el("td"), canvas = el("canvas", {
          className: "mv-cell", "data-layer": String(l), "data-head": String(h),
          title: s.meta.layer_names[l] + ", " + s.meta.head_names[h],
        });
        var map = s.map(l, h), peak = maxOf(map);
        paintMap(canvas, map, s.T, s.S, peak > 0 ? 1 / peak : 0);
        canvas.style.width = cellW + "px";
        canvas.style.height = cellH + "px";
        canvas.addEventListener("click", (function (l, h) {
          return function () { self.app.openHead(index, l, h); };
        })(l, h));
        td.appendChild(canvas);
        row.appendChild(td);
      }
      table.appendChild(row);
    }
    this.grid.appendChild(table);
  };

  // ---- matrix view -----------------------------------------------------------------------------------------

  function MatrixView(app, sets) {
    var self = this;
    this.sets = sets;
    this.set = 0;
    this.root = el("section", { className: "view", id: "view-matrix" });
    var controls = setControls("mx-set", "Attention", sets, function (v) {
      self.set = v;
      self.render();
    });
    this.selects = el("span", { className: "controls" });
    controls.appendChild(this.selects);
    this.root.appendChild(controls);
    this.root.appendChild(el("p", { className: "hint" }, "Rows: queries (target), columns: keys (source); colour " +
      "scaled from 0 to the map's maximum. Hover a cell for its pair and weight."));
    this.info = el("div", { className: "info", id: "mx-info" }, "\u00a0");
    this.root.appendChild(this.info);
    this.wrap = el("div", { className: "mx-wrap" });
    this.root.appendChild(this.wrap);
  }

  MatrixView.prototype.activate = function () { if (!this.built) this.render(); };

  MatrixView.prototype.render = function () {
    var self = this, s = this.sets[this.set];
    this.built = true;
    this.layer = 0;
    this.head = s.N > 1 ? -1 : 0;
    this.t = this.k = null;
    this.selects.textContent = "";
    if (s.L > 1) {
      this.selects.appendChild(selectBox("mx-layer", "Layer", layerOptions(s), 0, function (v) {
        self.layer = v; self.paint();
      }));
    }
    if (s.N > 1) {
      this.selects.appendChild(selectBox("mx-head", "Head", headOptions(s), -1, function (v) {
        self.head = v; self.paint();
      }));
    }
    var cell = Math.max(3, Math.min(32, Math.floor(640 / Math.max(s.T, s.S))));
    var labels = cell >= 11;
    this.cell = cell;
    this.wrap.textContent = "";
    var corner = el("div");
    this.top = el("div", { className: "mx-top" });
    this.leftLabels = el("div", { className: "mx-left" });
    this.topNodes = s.source.map(function (token) {
      var d = el("div", null, token);
      d.style.width = cell + "px";
      d.style.lineHeight = cell + "px";
      d.style.maxHeight = "140px";
      self.top.appendChild(d);
      return d;
    });
    this.leftNodes = s.target.map(function (token) {
      var d = el("div", null, token);
      d.style.height = cell + "px";
      d.style.lineHeight = cell + "px";
      d.style.maxWidth = "180px";
      self.leftLabels.appendChild(d);
      return d;
    });
    if (!labels) { this.top.style.display = "none"; this.leftLabels.style.display = "none"; }
    this.canvas = el("canvas", { id: "mx-canvas" });
    this.canvas.style.width = s.S * cell + "px";
    this.canvas.style.height = s.T * cell + "px";
    this.wrap.appendChild(corner);
    this.wrap.appendChild(this.top);
    this.wrap.appendChild(this.leftLabels);
    this.wrap.appendChild(this.canvas);
    this.canvas.addEventListener("mousemove", function (e) {
      var r = self.canvas.getBoundingClientRect();
      var k = Math.floor((e.clientX - r.left) / self.cell), t = Math.floor((e.clientY - r.top) / self.cell);
      if (t >= 0 && t < s.T && k >= 0 && k < s.S) self.hover(t, k);
    });
    this.canvas.addEventListener("mouseleave", function () { self.hover(null, null); });
    this.paint();
  };

  MatrixView.prototype.paint = function () {
    var s = this.sets[this.set];
    this.map = s.map(this.layer, this.head);
    var peak = maxOf(this.map);
    this.source = document.createElement("canvas");
    paintMap(this.source, this.map, s.T, s.S, peak > 0 ? 1 / peak : 0);
    this.hover(this.t, this.k);
  };

  MatrixView.prototype.hover = function (t, k) {
    var s = this.sets[this.set], dpr = window.devicePixelRatio || 1, cell = this.cell, canvas = this.canvas;
    var width = s.S * cell, height = s.T * cell;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    var ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(this.source, 0, 0, width, height);
    (this.topNodes || []).forEach(function (d) { d.classList.remove("hl"); });
    (this.leftNodes || []).forEach(function (d) { d.classList.remove("hl"); });
    this.t = t;
    this.k = k;
    if (t === null || k === null) {
      this.info.textContent = "\u00a0";
      ["data-target-index", "data-source-index", "data-weight"].forEach(function (a) {
        this.info.removeAttribute(a);
      }, this);
      return;
    }
    ctx.strokeStyle = "#ff3b30";
    ctx.lineWidth = 2;
    ctx.strokeRect(k * cell + 1, t * cell + 1, Math.max(1, cell - 2), Math.max(1, cell - 2));
    this.topNodes[k].classList.add("hl");
    this.leftNodes[t].classList.add("hl");
    var w = fmt(this.map[t * s.S + k]);
    var which = (s.L > 1 ? s.meta.layer_names[this.layer] + ", " : "") +
      (this.head < 0 ? "mean of heads" : s.meta.head_names[this.head]);
    this.info.textContent = "";
    this.info.appendChild(document.createTextNode("target \u201c" + s.target[t] + "\u201d (" + t + ") \u2192 " +
                                                  "source \u201c" + s.source[k] + "\u201d (" + k + "): "));
    this.info.appendChild(el("b", { className: "weight" }, w));
    this.info.appendChild(document.createTextNode("  \u00b7 " + which));
    this.info.setAttribute("data-target-index", String(t));
    this.info.setAttribute("data-source-index", String(k));
    this.info.setAttribute("data-weight", w);
  };

  // ---- image view ------------------------------------------------------------------------------------------

  function ImageView(app, images) {
    var self = this;
    this.images = images;
    this.set = 0;
    this.root = el("section", { className: "view", id: "view-image" });
    var controls = setControls("im-set", "Image", images, function (v) { self.set = v; self.render(); });
    this.selects = el("span", { className: "controls" });
    controls.appendChild(this.selects);
    this.root.appendChild(controls);
    this.hint = el("p", { className: "hint" });
    this.root.appendChild(this.hint);
    var body = el("div", { className: "im-body" });
    this.stage = el("div", { className: "im-stage" });
    this.img = el("img", { id: "im-image", alt: "image" });
    this.overlay = el("canvas", { id: "im-overlay" });
    this.stage.appendChild(this.img);
    this.stage.appendChild(this.overlay);
    var side = el("div");
    this.words = el("div", { className: "im-words", id: "im-queries" });
    this.info = el("div", { className: "info", id: "im-info" }, "\u00a0");
    side.appendChild(this.words);
    side.appendChild(this.info);
    body.appendChild(this.stage);
    body.appendChild(side);
    this.root.appendChild(body);
    this.overlay.addEventListener("mousemove", function (e) {
      var s = self.images[self.set], g = s.meta.grid, r = self.overlay.getBoundingClientRect();
      var row = Math.floor(((e.clientY - r.top) / r.height) * g[0]);
      var col = Math.floor(((e.clientX - r.left) / r.width) * g[1]);
      if (row < 0 || col < 0 || row >= g[0] || col >= g[1]) return;
      if (s.meta.patch_queries) self.query = s.meta.grid_start + row * g[1] + col;
      self.cell = [row, col];
      self.draw();
    });
    this.overlay.addEventListener("mouseleave", function () { self.cell = null; self.draw(); });
  }

  ImageView.prototype.activate = function () { if (!this.built) this.render(); };

  ImageView.prototype.render = function () {
    var self = this, s = this.images[this.set], m = s.meta;
    this.built = true;
    this.layer = 0;
    this.head = s.N > 1 ? -1 : 0;
    this.cell = null;
    this.query = 0;
    this.selects.textContent = "";
    if (s.L > 1) {
      this.selects.appendChild(selectBox("im-layer", "Layer", layerOptions(s), 0, function (v) {
        self.layer = v; self.draw();
      }));
    }
    if (s.N > 1) {
      this.selects.appendChild(selectBox("im-head", "Head", headOptions(s), -1, function (v) {
        self.head = v; self.draw();
      }));
    }
    this.hint.textContent = m.patch_queries
      ? "Hover a patch: the image shows where that patch attends (dark = little attention), scaled to its peak."
      : "Hover a word: the image shows where the model looked for it (dark = little attention), scaled to its " +
        "peak. Hover the image for a cell's weight.";
    var height = m.size[0], width = m.size[1];
    var shown = Math.min(480, width >= 256 ? width : width * Math.ceil(256 / width));
    this.width = shown;
    this.height = Math.round((height * shown) / width);
    this.img.src = m.png;
    this.img.width = this.width;
    this.img.height = this.height;
    this.img.classList.toggle("pixelated", width < 128);
    this.overlay.style.width = this.width + "px";
    this.overlay.style.height = this.height + "px";
    this.words.textContent = "";
    var cells = m.grid[0] * m.grid[1];
    this.wordNodes = s.target.map(function (word, i) {
      if (m.patch_queries && i >= m.grid_start && i < m.grid_start + cells) return null;
      var node = el("span", { className: "im-query", "data-index": String(i) }, word);
      node.addEventListener("mouseenter", function () { self.query = i; self.draw(); });
      self.words.appendChild(node);
      return node;
    });
    this.draw();
  };

  /* The query's weights over the K keys (Float32Array), for the chosen layer and head (or their mean). */
  ImageView.prototype.row = function () {
    var s = this.images[this.set], out = new Float32Array(s.S), heads = this.head < 0 ? range(s.N) : [this.head];
    for (var i = 0; i < heads.length; i++) {
      var base = s.offset(this.layer, heads[i]) + this.query * s.S;
      for (var k = 0; k < s.S; k++) out[k] += s.values[base + k];
    }
    for (var j = 0; j < s.S; j++) out[j] /= heads.length;
    return out;
  };

  ImageView.prototype.draw = function () {
    var s = this.images[this.set], m = s.meta, gh = m.grid[0], gw = m.grid[1], start = m.grid_start;
    var row = this.row(), peak = 0, argmax = 0, outside = 0;
    for (var k = 0; k < s.S; k++) {
      if (k >= start && k < start + gh * gw) {
        if (row[k] > peak) { peak = row[k]; argmax = k - start; }
      } else {
        outside += row[k];
      }
    }
    var small = document.createElement("canvas");
    small.width = gw;
    small.height = gh;
    var sctx = small.getContext("2d"), image = sctx.createImageData(gw, gh);
    for (var c = 0; c < gh * gw; c++) {
      var v = peak > 0 ? row[start + c] / peak : 0;
      image.data[c * 4 + 3] = Math.round(255 * 0.85 * (1 - v));
    }
    sctx.putImageData(image, 0, 0);
    var dpr = window.devicePixelRatio || 1, canvas = this.overlay;
    canvas.width = Math.round(this.width * dpr);
    canvas.height = Math.round(this.height * dpr);
    var ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.imageSmoothingEnabled = !!m.smooth;
    ctx.drawImage(small, 0, 0, this.width, this.height);
    var cw = this.width / gw, ch = this.height / gh;
    function box(r, col, colour) {
      ctx.strokeStyle = colour;
      ctx.lineWidth = 2;
      ctx.strokeRect(col * cw + 1, r * ch + 1, cw - 2, ch - 2);
    }
    var queryCell = null;
    if (m.patch_queries && this.query >= start && this.query < start + gh * gw) {
      queryCell = [Math.floor((this.query - start) / gw), (this.query - start) % gw];
      box(queryCell[0], queryCell[1], "#22d3ee");
    } else if (this.cell) {
      box(this.cell[0], this.cell[1], "#ff3b30");
    }
    var self = this;
    (this.wordNodes || []).forEach(function (node, i) { if (node) node.classList.toggle("focus", i === self.query); });
    var pr = Math.floor(argmax / gw), pc = argmax % gw, which = (s.L > 1 ? m.layer_names[this.layer] + ", " : "") +
      (s.N > 1 ? (this.head < 0 ? "mean of heads" : m.head_names[this.head]) : "");
    var info = this.info;
    info.textContent = "";
    info.appendChild(el("b", null, "\u201c" + s.target[this.query] + "\u201d"));
    var parts = [];
    if (this.cell && !m.patch_queries) {
      var w = fmt(row[start + this.cell[0] * gw + this.cell[1]]);
      parts.push("cell (" + this.cell[0] + ", " + this.cell[1] + "): " + w);
      info.setAttribute("data-weight", w);
      info.setAttribute("data-cell", this.cell[0] + "," + this.cell[1]);
    } else {
      info.removeAttribute("data-weight");
      info.removeAttribute("data-cell");
    }
    parts.push("peak " + fmt(peak) + " at (" + pr + ", " + pc + ")");
    if (start > 0 || s.S > start + gh * gw) parts.push("outside the grid " + fmt(outside));
    if (which) parts.push(which);
    info.appendChild(document.createTextNode("  " + parts.join("  \u00b7  ")));
    info.setAttribute("data-query", String(this.query));
    info.setAttribute("data-peak", fmt(peak));
    info.setAttribute("data-peak-cell", pr + "," + pc);
  };

  // ---- the page --------------------------------------------------------------------------------------------

  function App(meta, sets, images) {
    var self = this, root = document.getElementById("app");
    root.textContent = "";
    var header = el("header");
    header.appendChild(el("h1", null, meta.title));
    var tabs = el("nav", { className: "tabs" });
    header.appendChild(tabs);
    root.appendChild(header);
    this.views = {};
    this.tabs = {};
    if (sets.length) {
      this.views.head = new HeadView(this, sets);
      this.views.model = new ModelView(this, sets);
      this.views.matrix = new MatrixView(this, sets);
    }
    if (images.length) this.views.image = new ImageView(this, images);
    var names = { head: "Head view", model: "Model view", matrix: "Matrix view", image: "Image view" };
    Object.keys(this.views).forEach(function (name) {
      var button = el("button", { type: "button", id: "tab-" + name, "data-view": name }, names[name]);
      button.addEventListener("click", function () { self.show(name); });
      tabs.appendChild(button);
      self.tabs[name] = button;
      root.appendChild(self.views[name].root);
    });
  }

  App.prototype.show = function (name) {
    var self = this;
    Object.keys(this.views).forEach(function (n) {
      self.views[n].root.classList.toggle("active", n === name);
      self.tabs[n].classList.toggle("active", n === name);
    });
    this.current = name;
    document.documentElement.setAttribute("data-view", name);
    this.views[name].activate();
  };

  App.prototype.openHead = function (set, layer, head) {
    this.show("head");
    this.views.head.open(set, layer, head);
  };

  function fail(error) {
    viewer.error = String((error && error.message) || error);
    var root = document.getElementById("app");
    if (root) {
      root.textContent = "";
      root.appendChild(el("p", { className: "error" }, "The attention viewer could not start: " + viewer.error));
    }
    document.documentElement.setAttribute("data-error", viewer.error);
    console.error("attnlayers viewer:", error);
  }

  function start() {
    var meta = JSON.parse(document.getElementById("attn-meta").textContent);
    document.title = meta.title;
    var jobs = meta.sets.map(function (m) { return decode(m, meta.levels); })
      .concat(meta.images.map(function (m) { return decode(m, meta.levels); }));
    return Promise.all(jobs).then(function (values) {
      var sets = meta.sets.map(function (m, i) { return new MapSet(m, values[i], false); });
      var images = meta.images.map(function (m, i) { return new MapSet(m, values[meta.sets.length + i], true); });
      viewer.sets = sets;
      viewer.images = images;
      var app = (viewer.app = new App(meta, sets, images));
      var first = meta.view || (images.length ? "image"
                                                : sets.length === 1 && sets[0].L * sets[0].N === 1 ? "matrix" : "head");
      app.show(first);
      requestAnimationFrame(function () {
        viewer.readyAt = performance.now();
        document.documentElement.setAttribute("data-ready", "true");
      });
    });
  }

  try {
    start().catch(fail);
  } catch (error) {
    fail(error);
  }
})();
