/* placeholder: being written (NCCL transport) */
