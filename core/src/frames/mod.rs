pub mod shm;
