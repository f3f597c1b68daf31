/*
 * outfile.h - the file rule's writer for the layers below the loader
 * (outfile.c; docs/files.md). df_out_fd, df_out_stream, df_out_commit and
 * df_out_abort are include/deltafin.h's; these open and check without the
 * model check, which the public df_out_open and df_out_check add
 * (src/api/load.c) and the store and sessions do with ws_is_model_file.
 */
#ifndef DF_OUTFILE_H
#define DF_OUTFILE_H

#include "deltafin.h"

/* 0 if path may be written (nothing there, or a regular file of this user of the same format or empty); -1
 * with the reason. */
int df_outfile_check(const char *path, const char *magic, size_t magic_len, char *err, size_t errlen);
/* A new temporary file beside path, to be put there by df_out_commit; NULL with the reason. */
df_out *df_outfile_open(const char *path, const char *magic, size_t magic_len, char *err, size_t errlen);

#endif
