// Flagstaff console: the experiment form and page. Builds ExperimentMetric JSON from the metric
// rows, and calls the documented management API (window.flagstaff.api): create, launch, stop,
// archive and edit metrics through /experiments/, ship a variant through the flag's own update.
"use strict";

(() => {
  const { api, showErrors, isChangeRequest, showHeld } = window.flagstaff;
  const projectId = document.querySelector('meta[name="project-id"]')?.content || "@current";
  const base = `/api/projects/${projectId}`;
  const problem = (error) => (error.attr ? `${error.attr}: ${error.message}` : error.message);
  const field = (root, name) => root.querySelector(`[name="${name}"]`);
  const value = (root, name) => String(field(root, name)?.value || "").trim();

  // ---- metric rows ----------------------------------------------------------------------

  function renumber(list, prefix, legend) {
    [...list.children].forEach((row, index) => {
      row.querySelectorAll("[data-label]").forEach((span) => {
        span.textContent = `${prefix} ${index + 1} ${span.dataset.label === "share" ? "rollout %" : span.dataset.labelText || span.dataset.label}`;
      });
      const title = row.querySelector(legend);
      if (title) title.textContent = `${prefix} ${index + 1}`;
    });
  }

  function showFields(row) {
    const type = value(row, "metric_type");
    row.querySelectorAll("[data-when]").forEach((label) => {
      label.hidden = !label.dataset.when.split(" ").includes(type);
    });
    row.querySelectorAll("[data-needs-property]").forEach((label) => {
      const math = value(row, label.dataset.needsProperty);
      if (label.dataset.when.split(" ").includes(type)) label.hidden = math === "total";
    });
  }

  function addMetric(list, template, metric) {
    const row = template.content.firstElementChild.cloneNode(true);
    row.querySelectorAll("[data-label]").forEach((span) => {
      span.dataset.labelText = span.textContent;
    });
    if (metric) {
      row.dataset.uuid = metric.uuid || "";
      field(row, "name").value = metric.name || "";
      field(row, "metric_type").value = metric.metric_type;
      field(row, "goal").value = metric.goal || "increase";
      const source = metric.source || metric.numerator || (metric.series || [])[0] || {};
      field(row, "event").value = source.event || "";
      field(row, "math").value = source.math || "total";
      field(row, "math_property").value = source.math_property || "";
      if (metric.series && metric.series[1]) field(row, "step2").value = metric.series[1].event;
      if (metric.denominator) {
        field(row, "denominator").value = metric.denominator.event || "";
        field(row, "denominator_math").value = metric.denominator.math || "total";
        field(row, "denominator_property").value = metric.denominator.math_property || "";
      }
    }
    row.addEventListener("change", () => showFields(row));
    list.append(row);
    showFields(row);
    renumber(list, "Metric", "[data-metric-legend]");
  }

  function node(event, math, property) {
    const out = { kind: "EventsNode", event, math: math || "total" };
    if (out.math !== "total") out.math_property = property;
    return out;
  }

  function metricJson(row) {
    const type = value(row, "metric_type");
    const metric = { kind: "ExperimentMetric", metric_type: type, goal: value(row, "goal") };
    if (row.dataset.uuid) metric.uuid = row.dataset.uuid;
    const name = value(row, "name");
    if (name) metric.name = name;
    const event = value(row, "event");
    if (type === "funnel") {
      metric.series = [{ kind: "EventsNode", event }];
      const second = value(row, "step2");
      if (second) metric.series.push({ kind: "EventsNode", event: second });
    } else if (type === "mean") {
      metric.source = node(event, value(row, "math"), value(row, "math_property"));
    } else {
      metric.numerator = node(event, value(row, "math"), value(row, "math_property"));
      metric.denominator = node(
        value(row, "denominator"),
        value(row, "denominator_math"),
        value(row, "denominator_property"),
      );
    }
    return metric;
  }

  function setUpMetrics(form) {
    const list = form.querySelector("[data-metric-list]");
    const template = form.querySelector("[data-metric-template]");
    if (!list || !template) return () => [];
    const stored = JSON.parse(list.dataset.metrics || "[]");
    stored.forEach((metric) => addMetric(list, template, metric));
    form.querySelector("[data-add-metric]").addEventListener("click", () => addMetric(list, template));
    list.addEventListener("click", (event) => {
      const row = event.target.closest("[data-metric]");
      if (!row) return;
      if (event.target.closest("[data-remove-metric]")) row.remove();
      const move = event.target.closest("[data-move]");
      if (move) {
        const other = Number(move.dataset.move) < 0 ? row.previousElementSibling : row.nextElementSibling;
        if (other) Number(move.dataset.move) < 0 ? other.before(row) : other.after(row);
      }
      renumber(list, "Metric", "[data-metric-legend]");
    });
    return () => [...list.children].map(metricJson);
  }

  // ---- variants -------------------------------------------------------------------------

  function setUpVariants(form) {
    const list = form.querySelector("[data-variant-list]");
    const template = form.querySelector("[data-variant-template]");
    if (!list) return () => [];
    const add = (key, share) => {
      const row = template.content.firstElementChild.cloneNode(true);
      field(row, "variant_key").value = key;
      field(row, "variant_share").value = share;
      list.append(row);
      renumber(list, "Variant", null);
    };
    add("control", 50);
    add("test", 50);
    form.querySelector("[data-add-variant]").addEventListener("click", () => add("", 0));
    list.addEventListener("click", (event) => {
      if (event.target.closest("[data-remove-variant]")) {
        event.target.closest("[data-variant]").remove();
        renumber(list, "Variant", null);
      }
    });
    return () =>
      [...list.children].map((row) => ({
        key: value(row, "variant_key"),
        rollout_percentage: Number(value(row, "variant_share")),
      }));
  }

  function setUpCreate(form) {
    const metrics = setUpMetrics(form);
    const variants = setUpVariants(form);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const data = new FormData(form);
      const existing = data.get("flag_source") === "existing";
      const body = {
        name: value(form, "name"),
        description: value(form, "description"),
        feature_flag_key: existing ? value(form, "existing_flag_key") : value(form, "new_flag_key"),
        stats_config: {
          method: value(form, "stats_method"),
          sequential: data.get("sequential") === "on",
          cuped: data.get("cuped") === "on",
          cuped_lookback_days: Number(value(form, "cuped_lookback_days")) || null,
          multiple_testing_correction: value(form, "multiple_testing_correction"),
          auto_stop: data.get("auto_stop") === "on",
        },
        metrics: metrics(),
      };
      if (!existing) body.parameters = { feature_flag_variants: variants() };
      if (data.get("launch") === "now") body.start_date = new Date().toISOString();
      try {
        const made = await api("POST", `${base}/experiments/`, body);
        window.location.assign(`/experiments/${made.id}`);
      } catch (error) {
        showErrors([problem(error)]);
      }
    });
  }

  // ---- the experiment page --------------------------------------------------------------

  function setUpPage(facts) {
    const id = facts.dataset.experimentId;
    const flagId = facts.dataset.flagId;
    const patch = (body) => api("PATCH", `${base}/experiments/${id}/`, body);
    const now = () => new Date().toISOString();
    const ACTIONS = {
      launch: () => patch({ start_date: now() }),
      stop: () => patch({ end_date: now() }),
      archive: () =>
        window.confirm("Archive this experiment? Its flag keeps serving as it is.")
          ? patch({ archived: true })
          : null,
    };
    document.addEventListener("click", async (event) => {
      const button = event.target.closest("button[data-action]");
      const action = button && ACTIONS[button.dataset.action];
      if (!action) return;
      try {
        const done = action();
        if (done === null) return;
        await done;
        window.location.reload();
      } catch (error) {
        showErrors([problem(error)]);
      }
    });
    const ship = document.querySelector("form[data-ship-variant]");
    ship?.addEventListener("submit", async (event) => {
      event.preventDefault();
      const variant = value(ship, "variant");
      if (!window.confirm(`Serve ${variant} to everyone who gets this flag?`)) return;
      try {
        const flag = await api("GET", `${base}/feature_flags/${flagId}/`);
        const filters = {
          ...flag.filters,
          groups: [{ properties: [], rollout_percentage: 100, variant }],
        };
        const saved = await api("PATCH", `${base}/feature_flags/${flagId}/`, {
          filters,
          active: true,
        });
        if (isChangeRequest(saved)) {
          showHeld(saved);
          return;
        }
        if (document.querySelector('[data-status]')?.textContent === "running") {
          await patch({ end_date: now(), conclusion: "won", conclusion_comment: `Shipped ${variant}` });
        }
        window.location.reload();
      } catch (error) {
        showErrors([problem(error)]);
      }
    });
    const metricsForm = document.querySelector("form[data-metrics-form]");
    if (metricsForm) {
      const metrics = setUpMetrics(metricsForm);
      metricsForm.addEventListener("submit", async (event) => {
        event.preventDefault();
        try {
          await patch({ metrics: metrics() });
          window.location.reload();
        } catch (error) {
          showErrors([problem(error)]);
        }
      });
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("form[data-experiment-form]").forEach(setUpCreate);
    document.querySelectorAll("[data-experiment-id]").forEach(setUpPage);
  });
})();
