// Flagstaff console: the approvals page. Decisions and the policy go through the documented
// management API (window.flagstaff.api: the session cookie and the CSRF header).
"use strict";

(() => {
  const { api, showErrors } = window.flagstaff;
  const projectId = document.querySelector('meta[name="project-id"]')?.content || "@current";
  const base = `/api/projects/${projectId}`;

  function setUpPolicy(form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const enabled = form.querySelector('[name="enabled"]').checked;
      try {
        await api("PATCH", `${base}/approval_policy/`, { enabled });
        window.location.reload();
      } catch (error) {
        showErrors([error.message]);
      }
    });
  }

  function setUpRequests(section) {
    section.addEventListener("click", async (event) => {
      const button = event.target.closest("button[data-action]");
      if (!button || !["approve", "reject"].includes(button.dataset.action)) return;
      const item = button.closest("[data-change-request]");
      const comment = item.querySelector("[data-comment]")?.value || "";
      const id = button.dataset.requestId;
      button.disabled = true;
      try {
        await api("POST", `${base}/change_requests/${id}/${button.dataset.action}/`, { comment });
        window.location.reload();
      } catch (error) {
        button.disabled = false;
        showErrors([error.message]);
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("form[data-approval-policy]").forEach(setUpPolicy);
    document.querySelectorAll("[data-change-requests]").forEach(setUpRequests);
  });
})();
