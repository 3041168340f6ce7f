"""The report's parts: :func:`harness.reporting.report.write_report` and its sections (the command:
:mod:`evalaware.report`).

- what a method declares about its report rows is its :class:`~harness.methods.report_spec.ReportSpec`;
  the report reads these declarations and holds no list of method names.
- :mod:`.runs`: run directories loaded for the report (:class:`RunData`), human annotations.
- :mod:`.doc`: the document model rendered to Markdown and HTML, and the cell formats.
- :mod:`.context`: what every section reads (runs, per-method summaries, bootstrap settings).
- one module per group of sections: :mod:`.overview`, :mod:`.audit_section`, :mod:`.figures`,
  :mod:`.agreement`, :mod:`.answers`, :mod:`.families`, :mod:`.slices`.
"""
