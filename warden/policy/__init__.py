"""Policy files, layering (org bounds user), the pure decision engine, and tool pins."""
