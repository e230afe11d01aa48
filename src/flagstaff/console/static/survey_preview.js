// Flagstaff console: the survey preview frame. The builder posts the survey; posthog-js's own
// surveys-preview bundle (served by us under /static/) draws it here.
import { renderSurveysPreview } from "/static/surveys-preview.js";

const target = document.getElementById("preview");
window.addEventListener("message", (event) => {
  if (event.origin !== window.location.origin || event.source !== window.parent) return;
  const survey = event.data && event.data.flagstaffSurveyPreview;
  if (!survey) return;
  try {
    renderSurveysPreview({ survey, parentElement: target, previewPageIndex: 0 });
    target.dataset.rendered = String(Date.now());
  } catch (error) {
    target.dataset.error = error.message;
  }
});
