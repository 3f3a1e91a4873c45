"""The scaling family: tasks whose env steps cost a fixed time (``step_cost``), the sweep
over actor counts that times each to a confirmed solve (``scaling_suite``), and its report."""
