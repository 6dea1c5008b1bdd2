"""Local mode: the simulator on the wall clock (controller.live.LiveCluster) as the job
backend, with its state kept in the job database so that a restart resumes it, one server
per database (`server_lock`), and the events each transition implies (`history`)."""
