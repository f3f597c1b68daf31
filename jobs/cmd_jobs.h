/*
 * cmd_jobs.h - the job subcommands of the deltafin CLI (docs/jobs.md):
 * submit, jobs, job, cancel, worker.
 */
#ifndef DF_JOBS_CMD_H
#define DF_JOBS_CMD_H

/* 1 if cmd is one of the job subcommands. */
int jobs_is_command(const char *cmd);
/* Run it (argv[1] is the subcommand); returns the exit status. */
int jobs_main(int argc, char **argv);

#endif
