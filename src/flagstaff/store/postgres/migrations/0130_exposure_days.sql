-- Exposures over time (issue 27): each variant's totals in experiment_totals now carry its
-- exposed persons by the UTC day of their first exposure (VariantTotals.days, kept by
-- ingestion). No table changes; the totals stored before are given their days from the
-- stored persons by this migration's data step (store/postgres/experiments.py,
-- backfill_exposure_days), in the same transaction.
SELECT 1;
