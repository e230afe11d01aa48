// Flagstaff console: the survey builder and the survey page's actions, through the documented
// management API (window.flagstaff.api). The builder posts the survey it would save to the
// preview frame, where posthog-js's own survey code draws it.
"use strict";

(() => {
  const { api, showErrors } = window.flagstaff;
  const projectId = document.querySelector('meta[name="project-id"]')?.content || "@current";
  const surveys = `/api/projects/${projectId}/surveys`;
  const problem = (error) => (error.attr ? `${error.attr}: ${error.message}` : error.message);
  const field = (root, name) => root.querySelector(`[name="${name}"]`);
  const value = (root, name) => String(field(root, name)?.value || "").trim();
  const set = (root, name, text) => {
    const input = field(root, name);
    if (input && text !== undefined && text !== null) input.value = text;
  };

  function renumber(list, prefix) {
    [...list.children].forEach((row, index) => {
      row.querySelectorAll("[data-label]").forEach((span) => {
        span.dataset.labelText ||= span.textContent;
        span.textContent = `${prefix} ${index + 1} ${span.dataset.labelText}`;
      });
      const legend = row.querySelector("legend");
      if (legend) legend.textContent = `${prefix} ${index + 1}`;
    });
  }

  function showFields(row) {
    const kind = value(row, "qtype");
    row.querySelectorAll("[data-when]").forEach((label) => {
      label.hidden = !label.dataset.when.split(" ").includes(kind);
    });
  }

  function questionKind(question) {
    if (question.type === "rating") return question.scale === 10 ? "rating10" : "rating5";
    return question.type;
  }

  function questionJson(row) {
    const kind = value(row, "qtype");
    const out = { question: value(row, "question") };
    if (row.dataset.id) out.id = row.dataset.id;
    const description = value(row, "qdescription");
    if (description) out.description = description;
    if (kind === "rating5" || kind === "rating10") {
      Object.assign(out, { type: "rating", scale: kind === "rating10" ? 10 : 5, display: "number" });
      out.lowerBoundLabel = value(row, "lower") || (kind === "rating10" ? "Unlikely" : "Bad");
      out.upperBoundLabel = value(row, "upper") || (kind === "rating10" ? "Very likely" : "Great");
    } else if (kind === "single_choice" || kind === "multiple_choice") {
      out.type = kind;
      out.choices = value(row, "choices").split("\n").map((c) => c.trim()).filter(Boolean);
    } else if (kind === "link") {
      out.type = "link";
      out.link = value(row, "link");
    } else {
      out.type = "open";
    }
    return out;
  }

  function setUpBuilder(form) {
    const stored = JSON.parse(form.dataset.survey || "null");
    const questions = form.querySelector("[data-question-list]");
    const questionTemplate = form.querySelector("[data-question-template]");
    const properties = form.querySelector("[data-property-list]");
    const propertyTemplate = form.querySelector("[data-property-template]");

    const addQuestion = (question) => {
      const row = questionTemplate.content.firstElementChild.cloneNode(true);
      if (question) {
        row.dataset.id = question.id || "";
        set(row, "qtype", questionKind(question));
        set(row, "question", question.question);
        set(row, "qdescription", question.description);
        set(row, "choices", (question.choices || []).join("\n"));
        set(row, "link", question.link);
        set(row, "lower", question.lowerBoundLabel);
        set(row, "upper", question.upperBoundLabel);
      }
      questions.append(row);
      showFields(row);
      renumber(questions, "Question");
    };
    const addProperty = (property) => {
      const row = propertyTemplate.content.firstElementChild.cloneNode(true);
      if (property) {
        set(row, "prop_key", property.key);
        set(row, "prop_operator", property.operator || "exact");
        set(row, "prop_value", Array.isArray(property.value) ? property.value[0] : property.value);
      }
      properties.append(row);
      renumber(properties, "Condition");
    };

    const hadTargeting = Boolean(stored && stored.targeting_flag);
    if (stored) {
      set(form, "name", stored.name);
      set(form, "description", stored.description);
      set(form, "type", stored.type);
      stored.questions.forEach(addQuestion);
      const groups = stored.targeting_flag?.filters?.groups || [];
      (groups[0]?.properties || []).forEach(addProperty);
      const conditions = stored.conditions || {};
      set(form, "url", conditions.url);
      set(form, "url_match", conditions.urlMatchType);
      set(form, "selector", conditions.selector);
      set(form, "wait_days", conditions.seenSurveyWaitPeriodInDays);
      set(form, "start_date", stored.start_date ? stored.start_date.slice(0, 16) : "");
      set(form, "end_date", stored.end_date ? stored.end_date.slice(0, 16) : "");
      set(form, "responses_limit", stored.responses_limit);
    } else {
      addQuestion({ type: "open", question: "What could we do better?" });
    }

    const body = () => {
      const out = {
        name: value(form, "name"),
        description: value(form, "description"),
        type: value(form, "type"),
        questions: [...questions.children].map(questionJson),
      };
      const conditions = {};
      if (value(form, "url")) {
        conditions.url = value(form, "url");
        conditions.urlMatchType = value(form, "url_match");
      }
      if (value(form, "selector")) conditions.selector = value(form, "selector");
      if (value(form, "wait_days")) conditions.seenSurveyWaitPeriodInDays = Number(value(form, "wait_days"));
      out.conditions = Object.keys(conditions).length ? conditions : null;
      const props = [...properties.children]
        .filter((row) => value(row, "prop_key"))
        .map((row) => {
          const operator = value(row, "prop_operator");
          const prop = { key: value(row, "prop_key"), operator, type: "person" };
          if (operator !== "is_set") prop.value = value(row, "prop_value");
          else prop.value = "is_set";
          return prop;
        });
      if (props.length) {
        out.targeting_flag_filters = { groups: [{ properties: props, rollout_percentage: 100 }] };
      } else if (hadTargeting) {
        out.remove_targeting_flag = true;
      }
      const start = value(form, "start_date");
      const end = value(form, "end_date");
      // A date left as shown keeps its stored value (the field shows it to the minute).
      const date = (text, before) =>
        before && before.slice(0, 16) === text ? before : text ? `${text}:00Z` : null;
      if (field(form, "launch_now").checked) out.start_date = new Date().toISOString();
      else out.start_date = date(start, stored?.start_date);
      out.end_date = date(end, stored?.end_date);
      const limit = value(form, "responses_limit");
      out.responses_limit = limit ? Number(limit) : null;
      return out;
    };

    const frame = document.querySelector("[data-survey-preview]");
    let timer = null;
    const preview = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        const survey = { id: stored?.id || "preview", appearance: stored?.appearance || null, ...body() };
        frame?.contentWindow?.postMessage({ flagstaffSurveyPreview: survey }, window.location.origin);
      }, 150);
    };
    frame?.addEventListener("load", preview);
    form.addEventListener("input", preview);
    form.addEventListener("change", (event) => {
      const row = event.target.closest("[data-question]");
      if (row) showFields(row);
      preview();
    });

    form.querySelector("[data-add-question]").addEventListener("click", () => {
      addQuestion();
      preview();
    });
    form.querySelector("[data-add-property]").addEventListener("click", () => addProperty());
    form.addEventListener("click", (event) => {
      const row = event.target.closest("[data-question]");
      if (row && event.target.closest("[data-remove-question]")) row.remove();
      const move = row && event.target.closest("[data-move]");
      if (move) {
        const up = Number(move.dataset.move) < 0;
        const other = up ? row.previousElementSibling : row.nextElementSibling;
        if (other) up ? other.before(row) : other.after(row);
      }
      if (row) {
        renumber(questions, "Question");
        preview();
      }
      const property = event.target.closest("[data-property]");
      if (property && event.target.closest("[data-remove-property]")) {
        property.remove();
        renumber(properties, "Condition");
      }
    });

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        const saved = stored
          ? await api("PATCH", `${surveys}/${stored.id}/`, body())
          : await api("POST", `${surveys}/`, body());
        window.location.assign(`/surveys/${saved.id}`);
      } catch (error) {
        showErrors([problem(error)]);
      }
    });
  }

  function setUpPage(facts) {
    const survey = JSON.parse(facts.dataset.survey);
    const url = `${surveys}/${survey.id}/`;
    const now = () => new Date().toISOString();
    const ACTIONS = {
      launch: () => api("PATCH", url, { start_date: now(), end_date: null }),
      stop: () => api("PATCH", url, { end_date: now() }),
      archive: () => (window.confirm("Archive this survey?") ? api("POST", `${url}archive/`, {}) : null),
      duplicate: async () => {
        const copy = {
          name: `${survey.name} (copy)`,
          description: survey.description,
          type: survey.type,
          questions: survey.questions.map(({ id, ...question }) => question),
          conditions: survey.conditions,
          appearance: survey.appearance,
          responses_limit: survey.responses_limit,
        };
        if (survey.targeting_flag) copy.targeting_flag_filters = survey.targeting_flag.filters;
        const made = await api("POST", `${surveys}/`, copy);
        window.location.assign(`/surveys/${made.id}`);
        return "moved";
      },
    };
    document.addEventListener("click", async (event) => {
      const button = event.target.closest("button[data-survey-action]");
      const action = button && ACTIONS[button.dataset.surveyAction];
      if (!action) return;
      try {
        const done = await action();
        if (done === null || done === "moved") return;
        window.location.reload();
      } catch (error) {
        showErrors([problem(error)]);
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("form[data-survey-form]").forEach(setUpBuilder);
    document.querySelectorAll("[data-survey-id]").forEach(setUpPage);
  });
})();
