/*
 * web.S - the chat page (server/web/index.html) inside the program: serve.c sends it at /. Assembled from the
 * repository's root (make), so that .incbin finds the file; srv_web_page_len is its length (a NUL follows it).
 */
    .section .rodata
    .global srv_web_page
    .global srv_web_page_len
srv_web_page:
    .incbin "server/web/index.html"
srv_web_page_end:
    .byte 0
    .balign 8
srv_web_page_len:
    .quad srv_web_page_end - srv_web_page
    .section .note.GNU-stack,"",%progbits
